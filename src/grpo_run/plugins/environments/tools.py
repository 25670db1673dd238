"""The ``tools`` environment: the row's prompt, the enabled tools offered; each turn's tool calls
run and their answers come back as ``tool`` messages; a turn that calls nothing ends the episode.

The final answer is scored by the row's verifiers (the runner hands them the last turn's text);
``tool_use_reward`` can add a reward for episodes that used a tool without an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import attrs

from grpo_run import Action, EnvReset, EnvStep, Tool, ToolError


@attrs.frozen
class ToolsEnvConfig:
    """Options of the ``tools`` environment."""

    tools: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    """Tools offered (names of enabled ``[tools.<name>]``); empty: every enabled tool."""
    system_prompt: str = ""
    """A system message put before the row's messages (empty: none)."""
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
