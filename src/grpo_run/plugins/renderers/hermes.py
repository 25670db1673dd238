"""The ``chat-template`` renderer: the tokenizer's own chat template, tool calls in the Hermes /
Qwen form ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` by default, or another
format chosen by ``tool_format`` (:mod:`.tool_formats`: Llama 3 JSON, Mistral).

Text inside ``<think>...</think>`` is never read for tool calls (a call the model only thought
about is not executed).
"""

from __future__ import annotations

import json
import re

import attrs

from grpo_run import ParsedTurn, TemplateRenderer, ToolCall
from grpo_run.plugins.renderers.tool_formats import formats

_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL)
_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


@attrs.frozen
class ChatTemplateConfig:
    """Options of the ``chat-template`` renderer."""

    tool_format: str = attrs.field(default="hermes", validator=attrs.validators.in_(("hermes", "llama3-json", "mistral")))
    """How the model writes tool calls: ``hermes`` (Hermes / Qwen ``<tool_call>`` JSON),
    ``llama3-json`` (Llama 3.1 / 3.2: the turn is ``{"name": ..., "parameters": {...}}``, optionally
    after ``<|python_tag|>``) or ``mistral`` (``[TOOL_CALLS][{"name": ..., "arguments": {...}}]``)."""
    open_tag: str = "<tool_call>"
    """The markup that opens a tool call's JSON (``hermes`` format)."""
    close_tag: str = "</tool_call>"
    """The markup that closes it."""


def parse_hermes(text: str, open_tag: str = "<tool_call>", close_tag: str = "</tool_call>") -> ParsedTurn:
    """Tool calls of ``text`` in the Hermes form; unreadable ones become the parse error."""
    visible = _THINK.sub("", text)
    pattern = _CALL if (open_tag, close_tag) == ("<tool_call>", "</tool_call>") else re.compile(
        re.escape(open_tag) + r"(.*?)" + re.escape(close_tag), re.DOTALL)
    calls: list[ToolCall] = []
    errors: list[str] = []
    for k, match in enumerate(pattern.finditer(visible)):
        try:
            body = json.loads(match.group(1))
        except json.JSONDecodeError as exc:
            errors.append(f"tool call {k + 1}: not JSON ({exc.msg})")
            continue
        name = body.get("name") if isinstance(body, dict) else None
        arguments = body.get("arguments", {}) if isinstance(body, dict) else None
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                arguments = None
        if not isinstance(name, str) or not isinstance(arguments, dict):
            errors.append(f'tool call {k + 1}: expected {{"name": str, "arguments": object}}')
            continue
        calls.append(ToolCall(name, arguments, id=f"call_{k}"))
    if visible.count(open_tag) > visible.count(close_tag):
        errors.append(f"a {open_tag} is not closed by {close_tag}")
    return ParsedTurn(text, tuple(calls), "; ".join(errors) or None)


class ChatTemplateRenderer(TemplateRenderer):
    """The tokenizer's chat template with tool calls in the configured format."""

    name = "chat-template"
    Config = ChatTemplateConfig

    def parse_text(self, text: str) -> ParsedTurn:
        if self.config.tool_format != "hermes":
            return formats()[self.config.tool_format](text)
        return parse_hermes(text, self.config.open_tag, self.config.close_tag)
