"""The ``chat-template`` renderer: the tokenizer's own chat template, tool calls in the Hermes /
Qwen form ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` by default, or another
format chosen by ``tool_format`` (:mod:`.tool_formats`: Llama 3 JSON, Mistral).

Text inside ``<think>...</think>`` is never read for tool calls (a call the model only thought
about is not executed).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import structlog

from grpo_run import Message, ParsedTurn, TemplateRenderer, ToolCall, ToolSchema
from grpo_run.plugins.renderers.chatml_tools import BUILT_IN
from grpo_run.plugins.renderers.tool_formats import formats

_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL)
_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def _check_template(_: Any, __: Any, value: str) -> None:
    if value and value not in BUILT_IN and not Path(value).is_file():
        raise ValueError(f"{value!r} is neither a built-in template ({', '.join(BUILT_IN)}) nor a file")


def template_source(value: str) -> str | None:
    """The Jinja source ``chat_template`` names (``None``: the tokenizer's own)."""
    if not value:
        return None
    return BUILT_IN[value] if value in BUILT_IN else Path(value).read_text()


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
    chat_template: str = attrs.field(default="", validator=_check_template)
    """The chat template: empty for the tokenizer's own; ``"chatml-tools"``, a built-in ChatML
    template that shows tools and Hermes calls (for models whose own template drops tools, such
    as SmolLM2); or the path of a Jinja file."""


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

    def __init__(self, config: ChatTemplateConfig, tokenizer: Any) -> None:
        super().__init__(config, tokenizer)
        self.chat_template = template_source(config.chat_template)
        self._tools_checked = False

    def render(self, messages: Sequence[Message], tools: Sequence[ToolSchema]) -> list[int]:
        if tools and not self._tools_checked:  # once: a template that drops tools hides them silently
            self._tools_checked = True
            text = self._template(messages, tools, generation_prompt=True)
            names = [str(t.get("function", t).get("name", "")) for t in tools]
            if not any(name and name in text for name in names):
                structlog.get_logger().warning(
                    "chat_template_drops_tools", tools=names,
                    hint="the chat template shows the model none of the tools offered; use one that does "
                         "([renderer] chat_template = \"chatml-tools\", or a file)")
        return super().render(messages, tools)

    def parse_text(self, text: str) -> ParsedTurn:
        if self.config.tool_format != "hermes":
            return formats()[self.config.tool_format](text)
        return parse_hermes(text, self.config.open_tag, self.config.close_tag)
