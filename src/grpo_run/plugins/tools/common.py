"""The skeleton the built-in tools share: a tool that takes one string argument.

A subclass names itself, its ``Config``, the argument and the two descriptions of its schema,
and implements :meth:`OneStringTool.run`; the schema and the argument check are here, so every
such tool answers a missing or non-string argument with the same :class:`grpo_run.ToolError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from grpo_run import ToolError


class OneStringTool:
    """A tool called with ``{argument: "<text>"}`` that answers with text."""

    name: ClassVar[str]
    Config: ClassVar[type]
    description: ClassVar[str]
    """What the tool does, as the model reads it in the schema."""
    argument: ClassVar[str]
    """The one argument's name."""
    argument_description: ClassVar[str]
    """The argument as the model reads it in the schema (an example helps)."""

    def __init__(self, config: Any) -> None:
        self.config = config

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": {
                    "type": "object",
                    "properties": {self.argument: {"type": "string", "description": self.argument_description}},
                    "required": [self.argument],
                },
            },
        }

    def __call__(self, arguments: Mapping[str, Any]) -> str:
        value = arguments.get(self.argument) if isinstance(arguments, Mapping) else None
        if not isinstance(value, str):
            raise ToolError(f"{self.name} needs a string argument '{self.argument}'")
        return self.run(value)

    def run(self, value: str) -> str:
        """The answer to the argument ``value``; :class:`grpo_run.ToolError` for one it cannot take."""
        raise NotImplementedError
