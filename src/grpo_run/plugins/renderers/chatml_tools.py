"""``chatml-tools``: a ChatML chat template that shows tools and tool calls in the Hermes form.

For models whose own template drops tools (SmolLM2's ChatML template renders neither the tool
schemas nor an assistant's ``tool_calls``): ``[renderer] chat_template = "chatml-tools"``. The
tools are listed as JSON in the system turn; an assistant's ``tool_calls`` are written as
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, the form the ``chat-template``
renderer parses; tool answers come back in a ``user`` turn as ``<tool_response>`` blocks.
The preamble is short on purpose: every episode's prompt carries it, and the learner pays for it.
"""

from __future__ import annotations

CHATML_TOOLS = (
    "{%- if messages and messages[0]['role'] == 'system' %}"
    "{%- set system = messages[0]['content'] %}{%- set rest = messages[1:] %}"
    "{%- else %}{%- set system = '' %}{%- set rest = messages %}{%- endif %}"
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}{%- if system %}{{- system + '\\n\\n' }}{%- endif %}"
    "{{- 'Tools you can call:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\nTo call one, write <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>.<|im_end|>\\n' }}"
    "{%- elif system %}{{- '<|im_start|>system\\n' + system + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for m in rest %}"
    "{%- if m['role'] == 'tool' %}"
    "{%- if loop.first or loop.previtem['role'] != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + m['content'] + '\\n</tool_response>' }}"
    "{%- if loop.last or loop.nextitem['role'] != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- elif m['role'] == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' + (m['content'] or '') }}"
    "{%- for call in m.get('tool_calls') or [] %}"
    "{%- set f = call['function'] if call['function'] is defined else call %}"
    "{%- if loop.first and m['content'] %}{{- '\\n' }}{%- elif not loop.first %}{{- '\\n' }}{%- endif %}"
    "{{- '<tool_call>\\n{\"name\": \"' + f['name'] + '\", \"arguments\": ' }}"
    "{%- if f['arguments'] is string %}{{- f['arguments'] }}{%- else %}{{- f['arguments'] | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""The template's Jinja source (transformers' chat-template dialect: ``tojson``, ``loop.previtem``)."""

BUILT_IN = {"chatml-tools": CHATML_TOOLS}
"""Templates ``[renderer] chat_template`` can name."""
