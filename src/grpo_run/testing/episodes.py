"""``check_tool``, ``check_environment`` and ``check_renderer``: the parts of multi-turn episodes."""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping, Sequence
from typing import Any

from grpo_run.core.config.environment import EnvironmentSlot
from grpo_run.core.rollout import env_returns
from grpo_run.testing._common import Reporter, check_class, default_config, run_sync, short


def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        async def wait() -> Any:
            return await value
        return run_sync(wait())
    return value


def check_tool(cls: type, config: Any = None, *, cases: Sequence[tuple[Mapping[str, Any], str | None]] = ()) -> None:
    """Check a tool class; :class:`AssertionError` naming the check.

    * **schema**: ``schema()`` is an OpenAI function (``type = "function"``, ``function.name`` equal
      to the class's ``name``, ``parameters`` an object schema) and JSON-serialisable;
    * **cases**: each ``(arguments, expected)`` returns the string ``expected``, or raises
      :class:`grpo_run.ToolError` when ``expected`` is ``None``;
    * **bad arguments**: an empty argument object raises ``ToolError`` or returns a string, never
      another exception (a model's mistake must go back to it as a message).
    """
    from grpo_run import ToolError

    report = Reporter("tool", cls)
    check_class(cls, "tool", report)
    tool = cls(default_config(cls, config, report))
    schema = tool.schema()
    function = schema.get("function") if isinstance(schema, Mapping) else None
    if not isinstance(function, Mapping) or schema.get("type") != "function":
        raise report.fail("schema", f"expected {{'type': 'function', 'function': {{...}}}}, got {short(schema, 200)}")
    if function.get("name") != cls.name:
        raise report.fail("schema", f"function.name is {function.get('name')!r}, not the tool's name {cls.name!r}")
    if not isinstance(function.get("parameters"), Mapping) or function["parameters"].get("type") != "object":
        raise report.fail("schema", "function.parameters must be a JSON schema of type 'object'")
    try:
        json.dumps(schema)
    except TypeError as exc:
        raise report.fail("schema", f"not JSON-serialisable: {exc}") from None
    for arguments, expected in cases:
        try:
            got = tool(arguments)
        except ToolError as exc:
            if expected is not None:
                raise report.fail("cases", f"{short(arguments, 120)} raised ToolError({exc}), expected {expected!r}") from None
            continue
        if expected is None or got != expected:
            raise report.fail("cases", f"{short(arguments, 120)} returned {short(got, 120)}, expected "
                                       f"{'a ToolError' if expected is None else repr(expected)}")
    try:
        got = tool({})
    except ToolError:
        pass
    except Exception as exc:
        raise report.fail("bad arguments", f"{{}} raised {type(exc).__name__}: {exc}; raise grpo_run.ToolError") from None
    else:
        if not isinstance(got, str):
            raise report.fail("bad arguments", f"{{}} returned {type(got).__name__}, not a string")


def check_environment(cls: type, config: Any = None, *, tools: Mapping[str, Any] | None = None,
                      row: Mapping[str, Any] | None = None, reply: str = "hello") -> None:
    """Check an environment class with one scripted turn (a driven one, with ``run_episode``: one
    episode against a chat that answers ``reply``, which must make a call and return a finite reward).

    * **reset**: returns what the runner accepts (docs/environments.md, "What an environment may
      return"): a :class:`grpo_run.EnvReset` whose messages are role/content mappings and whose
      tools are JSON mappings;
    * **same seed, same start**: two resets with the same row and seed give equal messages;
    * **step**: a turn ``reply`` gives a :class:`grpo_run.EnvStep` the runner accepts (a number
      within the default ``environment.reward_range`` as reward, role/content messages, numeric
      metrics); ``close`` (when defined) accepts the state.
    """
    from grpo_run import Action, ParsedTurn

    report = Reporter("environment", cls)
    check_class(cls, "environment", report)
    env = cls(default_config(cls, config, report), dict(tools or {}))
    row = row if row is not None else {"id": "r0", "messages": [{"role": "user", "content": "1+1"}], "ground_truth": "2"}
    if hasattr(env, "run_episode"):
        _check_driven(env, row, reply, report)
        return
    first, second = (_maybe_await(env.reset(row, 7)) for _ in range(2))
    opening = _accepted(report, "reset", env_returns.reset_parts, first, max_chars=_SLOT.max_opening_chars)
    again = _accepted(report, "reset", env_returns.reset_parts, second, max_chars=_SLOT.max_opening_chars)
    if opening[0] != again[0]:
        raise report.fail("same seed, same start", "two resets with the same row and seed gave different messages")
    step = _maybe_await(env.step(opening[2], Action(ParsedTurn(reply), "stop", 0)))
    state = _accepted(report, "step", env_returns.step_parts, step, bounds=_SLOT.reward_range,
                      max_chars=_SLOT.max_tool_output_chars)[4]
    closer = getattr(env, "close", None)
    if callable(closer):
        _maybe_await(closer(state if state is not None else opening[2]))


_SLOT = EnvironmentSlot("checked")
"""The core environment settings at their defaults: the limits the checks hold to."""


def _accepted(report: Reporter, what: str, check: Any, value: Any, **limits: Any) -> Any:
    try:
        return check(value, **limits)
    except env_returns.BadReturn as exc:
        raise report.fail(what, f"returned {exc}") from None


class _ScriptedChat:
    """A :class:`grpo_run.Chat` answering every call with ``reply``; the fifth call raises EpisodeOver."""

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.calls = 0

    async def complete(self, messages: Any, tools: Any = (), *, max_tokens: Any = None, stop: Any = None) -> Any:
        from grpo_run import ChatTurn, EpisodeOver, ParsedTurn

        if self.calls >= 4:
            raise EpisodeOver("the episode can take no more turns: environment.max_turns = 4 calls were made")
        for m in messages:
            if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
                raise TypeError(f"message {short(m, 120)} needs a string role")
        self.calls += 1
        return ChatTurn(ParsedTurn(self.reply), (), (), "stop", 0, 0)

    def turns_left(self) -> int:
        return max(0, 4 - self.calls)

    def waiting(self) -> Any:
        import contextlib

        return contextlib.nullcontext()


def _check_driven(env: Any, row: Mapping[str, Any], reply: str, report: Reporter) -> None:
    """**run_episode**: with a chat answering ``reply``, it makes a call and returns a reward."""
    chat = _ScriptedChat(reply)
    try:
        result = _maybe_await(env.run_episode(row, 7, chat))
    except Exception as exc:
        raise report.fail("run_episode", f"raised {type(exc).__name__}: {exc}") from None
    _accepted(report, "run_episode", env_returns.episode_result, result, bounds=_SLOT.reward_range)
    if chat.calls == 0:
        raise report.fail("run_episode", "made no chat.complete call: an episode needs at least one sampled turn")


def check_renderer(cls: type, tokenizer: Any, config: Any = None) -> None:
    """Check a renderer class against ``tokenizer``.

    * **render**: a user message renders to a non-empty list of ints;
    * **parse**: a plain turn (its ids closed by ``end_of_turn_ids()``) parses to its text with no
      tool calls and no parse error;
    * **bridge**: for a tool answer after that turn, either ``None`` or ids such that the prompt,
      the turn and the bridge equal a fresh ``render`` of the whole conversation.
    """
    report = Reporter("renderer", cls)
    check_class(cls, "renderer", report)
    renderer = cls(default_config(cls, config, report), tokenizer)
    messages = [{"role": "user", "content": "1+1"}]
    prompt = renderer.render(messages, [])
    if not prompt or not all(isinstance(i, int) for i in prompt):
        raise report.fail("render", f"returned {short(prompt, 120)}, not a non-empty list of ids")
    turn_ids = list(tokenizer("2", add_special_tokens=False)["input_ids"]) + list(renderer.end_of_turn_ids())
    turn = renderer.parse(turn_ids)
    if turn.text != "2" or turn.tool_calls or turn.parse_error:
        raise report.fail("parse", f"the turn '2' parsed to {turn!r}")
    conversation = [*messages, turn.message()]
    new = [{"role": "tool", "content": "ok"}]
    bridge = renderer.bridge(conversation, new, [])
    if bridge is not None and prompt + turn_ids + list(bridge) != renderer.render([*conversation, *new], []):
        raise report.fail("bridge", "prompt + turn + bridge differs from a fresh render of the conversation")
