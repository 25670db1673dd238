"""The data environments, renderers and tools exchange with the episode runner.

A conversation is a list of OpenAI-style chat messages (``{"role": ..., "content": ...}``; an
assistant message may carry ``tool_calls``, a tool message a ``tool_call_id`` and ``name``).
Tools are offered to the model as OpenAI function schemas
(``{"type": "function", "function": {"name", "description", "parameters"}}``).

Everything here is re-exported by :mod:`grpo_run`; plugins import it from there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

Message = Mapping[str, Any]
"""One chat message: ``role`` (``system``/``user``/``assistant``/``tool``) and ``content``."""
ToolSchema = Mapping[str, Any]
"""One tool in OpenAI function form."""


class ToolError(Exception):
    """Raised by a tool for a bad call (wrong arguments, a failing program): the message goes back
    to the model as the tool's answer (or ends the episode, per ``environment.on_tool_error``)."""


@attrs.frozen
class ToolCall:
    """One tool call parsed from an assistant turn."""

    name: str
    arguments: Mapping[str, Any]
    id: str = ""
    """The call's id (the renderer makes one when the format has none)."""


@attrs.frozen
class ParsedTurn:
    """An assistant turn, as a renderer reads it from the sampled token ids."""

    text: str
    """The turn's content (tool-call markup included, end-of-turn token excluded)."""
    tool_calls: tuple[ToolCall, ...] = ()
    parse_error: str | None = None
    """Why some tool-call markup could not be read (the calls that could are in ``tool_calls``)."""

    def message(self) -> dict[str, Any]:
        """The assistant message this turn adds to the conversation: its text as sampled, markup
        included (structured ``tool_calls`` would make a template render the calls twice)."""
        return {"role": "assistant", "content": self.text}


@attrs.frozen
class Action:
    """What an environment's ``step`` receives: the model's parsed turn and how it ended."""

    turn: ParsedTurn
    finish_reason: str
    """``"stop"`` or ``"length"`` (a truncated turn never reaches ``step``: the episode ends)."""
    turn_index: int
    """0-based."""


@attrs.frozen
class EnvReset:
    """An episode's start: the opening messages, the tools offered and the environment's state."""

    messages: Sequence[Message]
    tools: Sequence[ToolSchema] = ()
    state: Any = None
    """The environment's own episode state, handed back to ``step``/``finish``/``close``."""


@attrs.frozen
class EnvStep:
    """What one environment step returns."""

    messages: Sequence[Message] = ()
    """Messages to append (role ``tool`` or ``user``)."""
    reward: float = 0.0
    """This turn's reward (combined over turns by ``environment.reward_combination``)."""
    done: bool = False
    metrics: Mapping[str, float] = attrs.field(factory=dict)
    """Extra numbers, averaged per step under ``env/<key>``."""
    state: Any = None
    """The new episode state (``None``: keep the previous one)."""
