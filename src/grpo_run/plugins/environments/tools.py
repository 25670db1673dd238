"""The ``tools`` environment: the row's prompt, the enabled tools offered; each turn's tool calls
run and their answers come back as ``tool`` messages; a turn that calls nothing ends the episode.

The final answer is scored by the row's verifiers (the runner hands them the last turn's text);
``tool_use_reward`` can add a reward for episodes that used a tool without an error.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Literal

import attrs

from grpo_run import Action, EnvReset, EnvStep, Tool, ToolError


_ROLES = ("system", "user", "assistant", "tool")


def _check_messages(_: Any, __: Any, messages: tuple[Any, ...]) -> None:
    """Each demonstration is a chat message the renderer can render."""
    for i, m in enumerate(messages):
        where = f"entry {i}"
        if not isinstance(m, Mapping):
            raise ValueError(f"{where} is {m!r:.80}, not a message table {{role = ..., content = ...}}")
        if m.get("role") not in _ROLES:
            raise ValueError(f"{where}: role {m.get('role')!r} is not one of {', '.join(_ROLES)}")
        if not isinstance(m.get("content", ""), str):
            raise ValueError(f"{where}: content must be a string, got {m['content']!r:.40}")
        if "tool_calls" in m and (m["role"] != "assistant" or not isinstance(m["tool_calls"], (list, tuple))):
            raise ValueError(f"{where}: tool_calls must be a list, on an assistant message")
        if "content" not in m and "tool_calls" not in m:
            raise ValueError(f"{where} has neither content nor tool_calls")


@attrs.frozen
class ToolsEnvConfig:
    """Options of the ``tools`` environment."""

    tools: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    """Tools offered (names of enabled ``[tools.<name>]``); empty: every enabled tool."""
    system_prompt: str = ""
    """A system message put before the row's messages (empty: none)."""
    demonstrations: tuple[dict[str, Any], ...] = attrs.field(default=(), converter=tuple,
                                                              validator=_check_messages)
    """Worked examples put after the system messages, before the row's question: a few-shot
    conversation in OpenAI form (``user`` / ``assistant`` with ``content`` or ``tool_calls`` /
    ``tool``), rendered by the run's renderer. A small model that never calls a tool on its own
    often does after two of them."""
    on_error: Literal["message", "end"] = "message"
    """A tool error, an unknown tool or a parse error: ``"message"`` tells the model (a ``tool``
    message starting ``error:``); ``"end"`` ends the episode."""
    tool_use_reward: float = 0.0
    """Reward of the turn that follows an error-free round of tool calls (the first such turn
    only): credit for using a tool at all."""


@attrs.define
class ToolsState:
    """Episode state of the ``tools`` environment."""

    calls: int = 0
    errors: int = 0
    rewarded: bool = False


class ToolsEnvironment:
    """Runs the model's tool calls; ends the episode when a turn calls no tool."""

    name = "tools"
    Config = ToolsEnvConfig

    def __init__(self, config: ToolsEnvConfig, tools: Mapping[str, Tool]) -> None:
        self.config = config
        missing = [t for t in config.tools if t not in tools]
        if missing:
            raise ValueError(f"tools {missing} are not enabled; enabled: {sorted(tools)} (add [tools.<name>] tables)")
        self.tools = {n: tools[n] for n in (config.tools or sorted(tools))}

    def reset(self, row: Mapping[str, Any], seed: int) -> EnvReset:
        messages = [dict(m) for m in row["messages"]] if "messages" in row else [{"role": "user", "content": row["prompt"]}]
        if self.config.system_prompt:
            messages.insert(0, {"role": "system", "content": self.config.system_prompt})
        if self.config.demonstrations:  # after the system messages, before the row's question
            first = next((i for i, m in enumerate(messages) if m.get("role") != "system"), len(messages))
            messages[first:first] = [{"content": "", **copy.deepcopy(m)} for m in self.config.demonstrations]
        return EnvReset(messages, [tool.schema() for tool in self.tools.values()], ToolsState())

    def step(self, state: ToolsState, action: Action) -> EnvStep:
        turn = action.turn
        replies: list[dict[str, Any]] = []
        errors = 0
        if turn.parse_error:
            errors += 1
            replies.append({"role": "tool", "name": "parser", "content": f"error: {turn.parse_error}"})
        for call in turn.tool_calls:
            tool = self.tools.get(call.name)
            try:
                if tool is None:
                    raise ToolError(f"no tool named {call.name!r}; tools: {', '.join(self.tools)}")
                answer = tool(call.arguments)
            except ToolError as exc:
                errors += 1
                answer = f"error: {exc}"
            replies.append({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": answer})
        state.calls += len(turn.tool_calls)
        state.errors += errors
        metrics = {"tool_calls": float(len(turn.tool_calls)), "tool_errors": float(errors)}
        if not replies:
            return EnvStep((), 0.0, True, metrics)
        if errors and self.config.on_error == "end":
            return EnvStep((), 0.0, True, metrics)
        reward = 0.0
        if not errors and not state.rewarded and self.config.tool_use_reward:
            state.rewarded = True
            reward = self.config.tool_use_reward
        return EnvStep(replies, reward, False, metrics)
