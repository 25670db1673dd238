"""The ``tiny-chat`` renderer: the shipped character model's chat format
(``<|user|>...<|assistant|>...<|eos|>``), where a tool call is a whole turn ``name(argument)``.

The character vocabulary has no braces or angle brackets, so calls are a tool name and one
argument, which fills the first required parameter of that tool's schema
(``calculator(12*34)`` -> ``calculator({"expression": "12*34"})``). Tool and system messages render
as user turns, as the model's template does.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import attrs

from grpo_run import Message, ParsedTurn, TemplateRenderer, ToolCall, ToolSchema

_CALL = re.compile(r"^\s*([a-z][a-z0-9]*)\((.*)\)\s*$", re.DOTALL)


@attrs.frozen
class TinyChatConfig:
    """Options of the ``tiny-chat`` renderer."""

    argument_names: dict[str, str] = attrs.Factory(dict)
    """Tool name -> the parameter its one argument fills (default: the schema's first required one)."""


class TinyChatRenderer(TemplateRenderer):
    """The character model's chat template; a turn ``name(argument)`` calls tool ``name``."""

    name = "tiny-chat"
    Config = TinyChatConfig

    def __init__(self, config: TinyChatConfig, tokenizer: Any) -> None:
        super().__init__(config, tokenizer)
        self._params: dict[str, str] = dict(config.argument_names)

    def render(self, messages: Sequence[Message], tools: Sequence[ToolSchema]) -> list[int]:
        self._learn(tools)
        return super().render(messages, tools)

    def _learn(self, tools: Sequence[ToolSchema]) -> None:
        for tool in tools:
            function = tool.get("function", {})
            required = function.get("parameters", {}).get("required") or list(function.get("parameters", {}).get("properties", {}))
            if function.get("name") and required:
                self._params.setdefault(function["name"], required[0])

    def parse_text(self, text: str) -> ParsedTurn:
        match = _CALL.match(text)
        if match is None:
            return ParsedTurn(text)
        name, argument = match.group(1), match.group(2)
        if name not in self._params:
            return ParsedTurn(text, (), f"no tool named {name!r}")
        return ParsedTurn(text, (ToolCall(name, {self._params[name]: argument}, id="call_0"),))
