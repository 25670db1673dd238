"""Environments with ordinary mistakes that hang (issue 33, item 5), as the installed distribution
``grpo-run-hanging`` (:func:`install`) a plugin author would ship: the environments
``blocking-async-step`` and ``hanging-sync-step`` and the tool ``hanging-tool``, on the
calculator-tool example. Each counts its ``step`` calls in this process; the first
``HOSTILE_FREE_STEPS`` (environment variable, default 0) behave, the next ``HOSTILE_BAD_STEPS``
(default: all) misbehave -- of those, every ``HOSTILE_EVERY``-th (default 1: each).

* :class:`BlockingAsyncStep`: ``async def step`` that calls ``time.sleep`` (``HOSTILE_HOLD_S``
  seconds, default an hour), holding the event loop; it prints ``hold over`` when the sleep ends.
* :class:`HangingSyncStep`: a plain ``def step`` whose call of the :class:`HangingTool` tool
  (``[tools.hanging-tool]``) never returns (waits on an event nobody sets).

Both behave like ``support.nudging_env:NudgingTools`` otherwise (a turn without a tool call gets a
fixed reply, so every episode plays its ``max_turns``). The module imports only ``grpo_run``.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import attrs

import grpo_run
from grpo_run import Action, EnvStep
from grpo_run.plugins.environments.tools import ToolsEnvironment, ToolsState

DISTRIBUTION = "grpo-run-hanging"

_calls = itertools.count(1)


def _misbehaves() -> bool:
    n, free = next(_calls), int(os.environ.get("HOSTILE_FREE_STEPS", "0"))
    every = int(os.environ.get("HOSTILE_EVERY", "1"))
    return free < n <= free + int(os.environ.get("HOSTILE_BAD_STEPS", str(10**9))) and (n - free) % every == 0


class _Nudging(ToolsEnvironment):
    """A turn that calls no tool gets the reply ``again`` instead of ending the episode; a turn
    earns 0.05 per character (so that a group's samples differ)."""

    def step(self, state: ToolsState, action: Action) -> EnvStep:
        step = super().step(state, action)
        reward = step.reward + 0.05 * len(action.turn.text)
        if action.turn.tool_calls or not step.done:
            return EnvStep(step.messages, reward, step.done, step.metrics)
        return EnvStep([{"role": "user", "content": "again"}], reward, False, step.metrics)


class BlockingAsyncStep(_Nudging):
    name = "blocking-async-step"

    async def step(self, state: ToolsState, action: Action) -> EnvStep:  # type: ignore[override]
        if _misbehaves():
            time.sleep(float(os.environ.get("HOSTILE_HOLD_S", "3600")))  # the mistake: blocking in async def
            print("hold over", file=sys.stderr, flush=True)
        return super().step(state, action)


class HangingSyncStep(_Nudging):
    name = "hanging-sync-step"

    def step(self, state: ToolsState, action: Action) -> EnvStep:
        if _misbehaves():
            self.tools[HangingTool.name]({"x": 1})
        return super().step(state, action)


class HangingTool:
    """A tool that never returns."""

    name = "hanging-tool"

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


@grpo_run.hookimpl
def grpo_run_register_environments(register: Any) -> None:
    register(BlockingAsyncStep)
    register(HangingSyncStep)


@grpo_run.hookimpl
def grpo_run_register_tools(register: Any) -> None:
    register(HangingTool)


def install(root: Path) -> Path:
    """This module as the installed distribution ``grpo-run-hanging`` under ``root`` (put ``root``
    on ``sys.path`` or ``PYTHONPATH``)."""
    from support.distributions import install_module  # here: the installed copy imports only grpo_run

    return install_module(root, "grpo_run_hanging", Path(__file__).read_text(encoding="utf-8"), DISTRIBUTION, "hanging")
