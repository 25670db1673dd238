"""Environments with ordinary mistakes that hang (issue 33, item 5), on the calculator-tool
example (``--set environment.name=support.hostile_envs:BlockingAsyncStep``). Each counts its
``step`` calls in this process; the first ``HOSTILE_FREE_STEPS`` (environment variable, default
0) behave, the next ``HOSTILE_BAD_STEPS`` (default: all) misbehave -- of those, every
``HOSTILE_EVERY``-th (default 1: each).

* :class:`BlockingAsyncStep`: ``async def step`` that calls ``time.sleep`` (``HOSTILE_HOLD_S``
  seconds, default an hour), holding the event loop; it prints ``hold over`` when the sleep ends.
* :class:`HangingSyncStep`: a plain ``def step`` whose call of the :class:`HangingTool` tool
  (``[tools."support.hostile_envs:HangingTool"]``) never returns (waits on an event nobody sets).
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time

import attrs

from grpo_run import Action, EnvStep
from grpo_run.plugins.environments.tools import ToolsState

from support.nudging_env import NudgingTools

_calls = itertools.count(1)


def _misbehaves() -> bool:
    n, free = next(_calls), int(os.environ.get("HOSTILE_FREE_STEPS", "0"))
    every = int(os.environ.get("HOSTILE_EVERY", "1"))
    return free < n <= free + int(os.environ.get("HOSTILE_BAD_STEPS", str(10**9))) and (n - free) % every == 0


class BlockingAsyncStep(NudgingTools):
    name = "blocking-async-step"

    async def step(self, state: ToolsState, action: Action) -> EnvStep:  # type: ignore[override]
        if _misbehaves():
            time.sleep(float(os.environ.get("HOSTILE_HOLD_S", "3600")))  # the mistake: blocking in async def
            print("hold over", file=sys.stderr, flush=True)
        return super().step(state, action)


class HangingSyncStep(NudgingTools):
    name = "hanging-sync-step"

    def step(self, state: ToolsState, action: Action) -> EnvStep:
        if _misbehaves():
            self.tools[HangingTool.path]({"x": 1})
        return super().step(state, action)


class HangingTool:
    """A tool that never returns."""

    name = "hanging-tool"
    path = "support.hostile_envs:HangingTool"

    @attrs.frozen
    class Config:
        pass

    def __init__(self, config: Config) -> None:
        self.config = config

    def schema(self) -> dict:
        return {"type": "function", "function": {"name": self.name, "parameters": {"type": "object"}}}

    def __call__(self, arguments: dict) -> str:
        threading.Event().wait()
        return ""
