"""Environments for ``environment.isolation = "process"`` tests: each call says which process ran
it; ``reset`` can keep memory for good and start a ``sleep`` child; ``step`` can raise or hang."""

from __future__ import annotations

import os
import subprocess
import time

import attrs

import grpo_run

KEPT: list[bytes] = []


@attrs.frozen
class WorkerEnvConfig:
    keep_mb: int = 0
    """Memory ``reset`` keeps for good."""
    sleep_s: str = ""
    """Start ``sleep <sleep_s>`` in ``reset`` (and never end it) when set."""


class WorkerEnv:
    name = "worker-env"
    Config = WorkerEnvConfig

    def __init__(self, config: WorkerEnvConfig, tools) -> None:
        self.config = config

    def reset(self, row, seed):
        KEPT.append(b"x" * (self.config.keep_mb << 20))
        if self.config.sleep_s:
            subprocess.Popen(["sleep", self.config.sleep_s])
        return grpo_run.EnvReset([{"role": "user", "content": "hi"}], state={"pid": os.getpid(), "turns": 0})

    def step(self, state, action):
        if action.turn.text == "raise":
            raise ValueError("no such move")
        if action.turn.text == "hang":
            time.sleep(60)
        if action.turn.text == "exit":
            raise SystemExit(3)
        return grpo_run.EnvStep(reward=1.0, state={**state, "turns": state["turns"] + 1},
                                metrics={"pid": float(os.getpid())})

    async def finish(self, state):
        return float(state["turns"])


class DrivingEnv:
    """Drives its own conversation: it needs the trainer's chat, so it cannot run in a worker."""

    name = "driving-env"
    Config = WorkerEnvConfig

    def __init__(self, config: WorkerEnvConfig, tools) -> None:
        pass

    async def run_episode(self, row, seed, chat):
        return grpo_run.EpisodeResult(0.0)
