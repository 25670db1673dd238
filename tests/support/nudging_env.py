"""A ``tools`` environment that never lets an episode end early: a turn that calls no tool gets a
fixed user reply instead of ending the episode, so the shipped model (which answers without
calling tools) plays every ``max_turns`` turn. A turn earns 0.05 per character (so that the
samples of a group differ and every step has something to learn). Configured by import path:
``--set environment.name=support.nudging_env:NudgingTools`` on the calculator-tool example."""

from __future__ import annotations

from grpo_run import Action, EnvStep
from grpo_run.plugins.environments.tools import ToolsEnvironment, ToolsState

REPLY = "again"


class NudgingTools(ToolsEnvironment):
    name = "nudging-tools"

    def step(self, state: ToolsState, action: Action) -> EnvStep:
        step = super().step(state, action)
        reward = step.reward + 0.05 * len(action.turn.text)
        if action.turn.tool_calls or not step.done:
            return EnvStep(step.messages, reward, step.done, step.metrics)
        return EnvStep([{"role": "user", "content": REPLY}], reward, False, step.metrics)


class SlowNudgingTools(NudgingTools):
    """:class:`NudgingTools` whose steps take 50 ms: a run spends its time in episodes, so a
    signal lands mid-rollout."""

    name = "slow-nudging-tools"

    def step(self, state: ToolsState, action: Action) -> EnvStep:
        import time

        time.sleep(0.05)
        return super().step(state, action)
