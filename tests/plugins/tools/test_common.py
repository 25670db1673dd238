"""The one-string-argument tool skeleton: the schema it writes and the argument check it makes."""

from __future__ import annotations

import pytest

from grpo_run import NoConfig, ToolError
from grpo_run.plugins.tools.common import OneStringTool


class Shout(OneStringTool):
    name = "shout"
    Config = NoConfig
    description = "Say it louder."
    argument = "text"
    argument_description = "what to say"

    def run(self, text: str) -> str:
        return text.upper()


def test_the_schema_names_the_one_string_argument() -> None:
    assert Shout(NoConfig()).schema() == {
        "type": "function",
        "function": {
            "name": "shout",
            "description": "Say it louder.",
            "parameters": {
                "type": "object",
                "properties": {"text": {"type": "string", "description": "what to say"}},
                "required": ["text"],
            },
        },
    }


def test_the_argument_is_checked_before_run() -> None:
    tool = Shout(NoConfig())
    assert tool({"text": "hi"}) == "HI"
    for arguments in ({}, {"text": 3}, {"other": "hi"}, ["text"], None):
        with pytest.raises(ToolError, match=r"^shout needs a string argument 'text'$"):
            tool(arguments)
