"""The data environments, renderers and tools exchange with the episode runner.

A conversation is a list of OpenAI-style chat messages (``{"role": ..., "content": ...}``; an
assistant message may carry ``tool_calls``, a tool message a ``tool_call_id`` and ``name``).
Tools are offered to the model as OpenAI function schemas
(``{"type": "function", "function": {"name", "description", "parameters"}}``).

Everything here is re-exported by :mod:`grpo_run`; plugins import it from there. What an
environment returns is checked by the runner (``grpo_run.core.rollout.env_returns``); a value
outside the contract drops the episode (docs/environments.md, "What an environment may return").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, runtime_checkable

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
    """At most 64 messages with str ``role`` and ``content``; each content is cut at
    ``environment.max_opening_chars``."""
    tools: Sequence[ToolSchema] = ()
    """At most 64 tool schemas: mappings that are JSON."""
    state: Any = None
    """The environment's own episode state, handed back to ``step``/``finish``/``close``."""


@attrs.frozen
class EnvStep:
    """What one environment step returns."""

    messages: Sequence[Message] = ()
    """Messages to append (role ``tool`` or ``user``): at most 64, each content cut at
    ``environment.max_tool_output_chars``."""
    reward: float = 0.0
    """This turn's reward, a number within ``environment.reward_range`` (combined over turns by
    ``environment.reward_combination``)."""
    done: bool = False
    metrics: Mapping[str, float] = attrs.field(factory=dict)
    """Extra finite numbers (at most 64), averaged per step under ``env/<key>``."""
    state: Any = None
    """The new episode state (``None``: keep the previous one)."""


# -- environments that drive their own conversation -------------------------------------------


class EpisodeOver(Exception):
    """Raised by :meth:`Chat.complete` once the episode can take no more turns: ``max_turns``
    calls were made, the token budget (``rollout.response_length``) is spent, the conversation no
    longer fits it, or a turn was cut by the episode's length limit. The message says which.
    Catch it to end the episode with a reward; left uncaught it drops the episode (counted)."""


@attrs.frozen
class ChatTurn:
    """One assistant turn sampled by :meth:`Chat.complete`."""

    turn: ParsedTurn
    """The turn as the renderer reads it. A turn cut at a length limit has no ``tool_calls``
    (a call in a truncated turn must never run)."""
    token_ids: tuple[int, ...]
    """Exactly the sampled ids (end-of-turn token included when the turn stopped)."""
    logprobs: tuple[float, ...]
    """The engine's log-prob of each sampled id."""
    finish_reason: str
    """``"stop"`` (the turn ended) or ``"length"`` (cut at ``max_tokens`` or a budget)."""
    prompt_tokens: int
    """Ids of the rendered conversation the turn was sampled after."""
    completion_tokens: int

    @property
    def text(self) -> str:
        return self.turn.text

    def message(self) -> dict[str, Any]:
        """The assistant message to append to the conversation (its text as sampled)."""
        return self.turn.message()


@attrs.frozen
class EpisodeResult:
    """What an environment's ``run_episode`` returns."""

    reward: float
    """The episode's reward, within ``environment.reward_range`` (the row's verifiers, scoring
    ``text``, add theirs)."""
    metrics: Mapping[str, float] = attrs.field(factory=dict)
    """Extra numbers, averaged per batch under ``env/<key>``."""
    text: str | None = None
    """The text the row's verifiers score; ``None``: the last sampled turn's text."""


@runtime_checkable
class Chat(Protocol):
    """The policy, as a driven episode sees it: one handle per episode, made by the runner.

    Each ``complete`` renders ``messages`` (with ``tools`` offered) through the run's renderer and
    samples one assistant turn. The runner records the episode token-in/token-out: when the
    rendered ids extend the previous call's prompt and sampled ids, the new ids are appended
    (masked, like environment messages) and the segment goes on; otherwise a new segment starts
    from the fresh render. To keep one segment, append :meth:`ChatTurn.message` (the turn as it
    was sampled) to the conversation, not a reformatted copy.
    """

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSchema] = (), *,
                       max_tokens: int | None = None, stop: Sequence[str] | None = None) -> ChatTurn:
        """Sample one turn after ``messages``; ``max_tokens`` caps it below the episode's own
        limits, ``stop`` adds stop strings. Raises :class:`EpisodeOver` when the episode can take
        no more turns."""
        ...

    def turns_left(self) -> int:
        """Calls of :meth:`complete` that may still start: 0 once ``environment.max_turns`` calls
        have started or the episode's budget is spent (a further call raises :class:`EpisodeOver`)."""
        ...

    def waiting(self) -> AbstractContextManager[None]:
        """A block in which the episode waits for the run, not for its own code: for an environment
        that brings :meth:`complete` to its code some other way (the ``agent`` environment's HTTP
        endpoint, from a request's arrival until its answer). Usable from any thread;
        ``environment.episode_timeout_s`` does not count it, nor the rest of the wait of the
        episode's code that it is part of."""
        ...
