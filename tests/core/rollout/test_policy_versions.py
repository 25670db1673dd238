"""Completions that span policy versions (in-flight weight updates) and the staleness metrics
built from them; weight-sync time and failures in the loop."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from grpo_run import Completion, RunError
from grpo_run.core.config.schema import AlgorithmSection
from grpo_run.core.loop.observers import StepEvent
from grpo_run.core.loop.scheduler import LoopParts, LoopSettings, TrainingLoop
from grpo_run.core.rollout.sequences import RolloutBatch, RolloutGroup, build_sequences


def comp(first: int, last: int | None = None) -> Completion:
    return Completion(token_ids=(5, 6), logprobs=(-1.0, -1.0), text="x", finish_reason="stop",
                      policy_version=first, last_policy_version=last)


def test_a_completion_without_a_last_version_came_from_one_policy():
    assert comp(3).policy_versions == (3, 3)
    assert comp(3, 5).policy_versions == (3, 5)


def test_staleness_metrics_use_the_oldest_and_newest_version_of_each_completion():
    groups = [RolloutGroup(row={"id": "a"}, prompt_ids=[1], completions=[comp(4), comp(4, 6), comp(5, 6), comp(6)],
                           rewards=[1.0, 0.0, 0.0, 1.0], max_reward=1.0)]
    _, metrics = build_sequences(RolloutBatch(1, groups, 0.1, {}), AlgorithmSection(), learner_version=6)
    # oldest versions 4, 4, 5, 6 -> staleness max 2, mean (2 + 2 + 1 + 0) / 4; newest 4, 6, 6, 6 -> (2 + 0 + 0 + 0) / 4.
    assert metrics["rollout/staleness_max"] == 2.0
    assert metrics["rollout/staleness_mean"] == 1.25
    assert metrics["rollout/staleness_newest_mean"] == 0.5
    assert metrics["rollout/mixed_version_rate"] == 0.5
    assert metrics["rollout/version_span_max"] == 2.0


class _Producer:
    async def produce(self, index: int) -> RolloutBatch:
        group = RolloutGroup(row={"id": "a"}, prompt_ids=[1], completions=[comp(0), comp(0)], rewards=[0.0, 1.0],
                             max_reward=1.0)
        return RolloutBatch(index, [group], 0.01, {})

    def rollout_state(self) -> dict[str, Any]:
        return {}


class _Learner:
    def __init__(self) -> None:
        self.steps = 0

    def train_step(self, seqs: Any) -> dict[str, float]:
        self.steps += 1
        return {}

    def skip_step(self) -> None:
        self.steps += 1

    def weights_snapshot(self) -> dict[str, int]:
        return {"w": self.steps}


class _SlowEngine:
    name = "slow"

    def __init__(self, fail_at: int | None = None) -> None:
        self.fail_at = fail_at

    async def update_weights(self, state_dict: Any, version: int) -> None:
        if version == self.fail_at:
            raise ConnectionResetError("peer went away")
        await asyncio.sleep(0.05)


class _Recorder:
    def __init__(self) -> None:
        self.events: list[StepEvent] = []

    def on_step(self, event: StepEvent) -> None:
        self.events.append(event)

    def on_run_end(self, status: str, error: BaseException | None) -> None:
        pass


def _run(engine: _SlowEngine, steps: int = 4) -> _Recorder:
    recorder = _Recorder()
    loop = TrainingLoop(LoopParts(_Producer(), _Learner(), engine), LoopSettings(total_steps=steps), [recorder])
    asyncio.run(loop.run())
    return recorder


def test_weight_sync_time_is_reported_with_the_step_metrics():
    recorder = _run(_SlowEngine())
    synced = [e.metrics["perf/weight_sync_s"] for e in recorder.events]
    assert len(synced) == 4 and all(s >= 0.0 for s in synced)
    # Three syncs of >= 50 ms (after steps 1-3; none after the last), each reported once.
    assert sum(synced) >= 0.15 and sum(synced) < 1.0


def test_a_failing_sync_ends_the_run_naming_the_engine_and_the_step():
    with pytest.raises(RunError, match=r"engine 'slow': weight sync for step 2 failed: ConnectionResetError: peer went away"):
        _run(_SlowEngine(fail_at=2))
