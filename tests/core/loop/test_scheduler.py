"""The loop's scheduling with fake engines and learners: bounded staleness, real overlap of
generation and training with ``async_steps = 2``, none with 1, and observers in step order."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from grpo_run import Completion
from grpo_run.core.loop.observers import StepEvent
from grpo_run.core.loop.scheduler import LoopParts, LoopSettings, TrainingLoop
from grpo_run.core.rollout.sequences import RolloutBatch, RolloutGroup

GEN_S = 0.15
TRAIN_S = 0.15


class FakeEngine:
    def __init__(self) -> None:
        self.version = 0
        self.updates: list[int] = []

    async def update_weights(self, state_dict: Any, version: int) -> None:
        self.version = version
        self.updates.append(version)


class FakeProducer:
    """Each batch takes GEN_S of (async) generation; its completions carry the engine's version."""

    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine
        self.intervals: dict[int, tuple[float, float]] = {}
        self.drawn = 0

    def rollout_state(self) -> dict[str, Any]:
        return {"sampler": {"next": self.drawn}}

    async def produce(self, index: int) -> RolloutBatch:
        self.drawn += 1  # like RolloutProducer: prompts are drawn before the first await
        start = time.perf_counter()
        version = self.engine.version
        await asyncio.sleep(GEN_S)
        self.intervals[index] = (start, time.perf_counter())
        comp = Completion(token_ids=(3, 4), logprobs=(-1.0, -1.0), text="x", finish_reason="stop",
                          policy_version=version)
        group = RolloutGroup(row={"id": f"p{index}"}, prompt_ids=[1, 2], completions=[comp, comp],
                             rewards=[0.0, 1.0], max_reward=1.0)
        return RolloutBatch(index, [group], GEN_S, {})


class FakeLearner:
    """Training takes TRAIN_S of blocking work (the loop runs it in a thread)."""

    def __init__(self) -> None:
        self.steps = 0
        self.intervals: dict[int, tuple[float, float]] = {}
        self.threads: set[str] = set()

    def train_step(self, seqs: Any) -> dict[str, float]:
        start = time.perf_counter()
        self.threads.add(threading.current_thread().name)
        time.sleep(TRAIN_S)
        self.steps += 1
        self.intervals[self.steps] = (start, time.perf_counter())
        return {"loss/total": float(len(seqs))}

    def skip_step(self) -> None:
        self.steps += 1

    def weights_snapshot(self) -> dict[str, int]:
        return {"weights": self.steps}


class Recorder:
    def __init__(self) -> None:
        self.events: list[StepEvent] = []

    def on_step(self, event: StepEvent) -> None:
        self.events.append(event)

    def on_run_end(self, status: str, error: BaseException | None) -> None:
        pass


def run_loop(async_steps: int, steps: int = 5, save_freq: int = 0) -> tuple[FakeProducer, FakeLearner, FakeEngine, Recorder]:
    engine = FakeEngine()
    producer, learner, recorder = FakeProducer(engine), FakeLearner(), Recorder()
    loop = TrainingLoop(LoopParts(producer, learner, engine),
                        LoopSettings(total_steps=steps, async_steps=async_steps, save_freq=save_freq), [recorder])
    asyncio.run(loop.run())
    return producer, learner, engine, recorder


def overlap(a: tuple[float, float], b: tuple[float, float]) -> float:
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0]))


def test_async_steps_2_generates_the_next_batch_while_training_and_is_one_step_stale() -> None:
    producer, learner, engine, recorder = run_loop(async_steps=2)
    # Batches 1 and 2 start together (both may use the initial weights); from then on batch i+1
    # is generated during the training step on batch i.
    assert overlap(producer.intervals[1], producer.intervals[2]) > 0.5 * GEN_S
    overlaps = [overlap(producer.intervals[i + 1], learner.intervals[i]) for i in range(2, 5)]
    assert all(o > 0.5 * min(GEN_S, TRAIN_S) for o in overlaps), overlaps
    staleness = [e.metrics["rollout/staleness_max"] for e in recorder.events]
    assert staleness[0] == 0.0 and max(staleness) == 1.0 and all(s <= 1.0 for s in staleness)
    assert [e.step for e in recorder.events] == [1, 2, 3, 4, 5]
    assert learner.threads and "MainThread" not in learner.threads  # never blocks the event loop
    # Wall time: about max(gen, train) per step, not their sum.
    elapsed = learner.intervals[5][1] - producer.intervals[1][0]
    assert elapsed < 5 * (GEN_S + TRAIN_S) * 0.8


def test_async_steps_1_is_synchronous_and_on_policy() -> None:
    producer, learner, engine, recorder = run_loop(async_steps=1)
    assert all(overlap(producer.intervals[i + 1], learner.intervals[i]) == 0.0 for i in range(1, 5))
    assert [e.metrics["rollout/staleness_max"] for e in recorder.events] == [0.0] * 5
    assert engine.updates == [1, 2, 3, 4]  # weights reach the engine before every later batch


@pytest.mark.parametrize("async_steps", [1, 2, 3])
def test_staleness_never_exceeds_async_steps_minus_one(async_steps: int) -> None:
    _, _, _, recorder = run_loop(async_steps=async_steps, steps=6)
    assert max(e.metrics["rollout/staleness_max"] for e in recorder.events) == async_steps - 1


def test_a_checkpoint_step_carries_the_rollout_state_from_before_the_next_draw() -> None:
    _, _, _, recorder = run_loop(async_steps=2, steps=4, save_freq=2)
    states = {e.step: e.rollout_state for e in recorder.events}
    # Every step carries the state from before the next batch was drawn -- an interrupt may need
    # it after any step -- including the draws of batches already in flight (async_steps = 2).
    assert states == {1: {"sampler": {"next": 1}}, 2: {"sampler": {"next": 2}}, 3: {"sampler": {"next": 3}}, 4: None}


class SlowEvaluator:
    """Evaluation at step 0 is quick; later ones take ``slow_s`` (an eval longer than the limit)."""

    def __init__(self, slow_s: float) -> None:
        self.slow_s = slow_s
        self.started: list[int] = []

    async def evaluate(self, step: int) -> dict[str, float]:
        self.started.append(step)
        await asyncio.sleep(self.slow_s if step else 0.0)
        return {"eval/accuracy": 0.0}


class StalledProducer(FakeProducer):
    """Batch ``stall_at`` never finishes generating (a limit must not wait for it)."""

    stall_at = 3

    async def produce(self, index: int) -> RolloutBatch:
        if index == self.stall_at:
            self.drawn += 1
            await asyncio.sleep(3600)
        return await super().produce(index)


def test_the_time_limit_cuts_an_evaluation_in_progress() -> None:
    engine = FakeEngine()
    producer, learner, recorder, evaluator = FakeProducer(engine), FakeLearner(), Recorder(), SlowEvaluator(60.0)
    loop = TrainingLoop(LoopParts(producer, learner, engine, evaluator),
                        LoopSettings(total_steps=50, local_eval_every=2, max_runtime_s=2.0), [recorder])
    started = time.perf_counter()
    state = asyncio.run(loop.run())
    # Without the cut the step-2 evaluation alone would take 60 s.
    assert time.perf_counter() - started < 10.0
    assert evaluator.started == [0, 2] and state.version == 2 and learner.steps == 2
    assert state.stop_reason == "train.max_runtime_s=2.0 reached" and state.cut_short == ("evaluation",)
    assert [e.step for e in recorder.events] == [0, 1, 2]  # step 2 is kept, without eval metrics
    assert "eval/accuracy" not in recorder.events[-1].metrics


def test_the_time_limit_abandons_a_batch_being_generated_and_keeps_its_draw_for_a_resume() -> None:
    engine = FakeEngine()
    producer, learner, recorder = StalledProducer(engine), FakeLearner(), Recorder()
    loop = TrainingLoop(LoopParts(producer, learner, engine),
                        LoopSettings(total_steps=50, max_runtime_s=1.0), [recorder])
    started = time.perf_counter()
    state = asyncio.run(loop.run())
    assert time.perf_counter() - started < 10.0
    assert state.version == learner.steps == 2 and [e.step for e in recorder.events] == [1, 2]
    assert state.cut_short == ("generation",)
    assert loop.resume_rollout_state() == {"sampler": {"next": 2}}  # batch 3 is drawn again after a resume


def test_the_loop_threads_own_torch_calls_use_one_intra_op_thread_and_the_setting_comes_back() -> None:
    """A multi-threaded torch call on the event loop's thread starts a second OpenMP pool, and
    GNU OpenMP then makes every pool's idle threads sleep almost at once: generation and the
    learner lost 30% on 2 cores (bench-small). The loop's own calls run on one thread."""
    import torch

    seen: list[int] = []

    class Watching(FakeProducer):
        async def produce(self, index: int) -> RolloutBatch:
            seen.append(torch.get_num_threads())  # on the loop's thread, like group statistics
            return await super().produce(index)

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        engine = FakeEngine()
        loop = TrainingLoop(LoopParts(Watching(engine), FakeLearner(), engine), LoopSettings(total_steps=2), [])
        asyncio.run(loop.run())
        assert seen and set(seen) == {1}
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


@pytest.mark.skipif(not __import__("os").path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_group_statistics_start_no_thread_pool() -> None:
    """``max(dim)`` (values and indices) enters an OpenMP region even for 16 x 8 rewards; the spread
    test uses ``amax`` / ``amin``, which do not. Run in a fresh interpreter: a pool, once started,
    stays."""
    import subprocess
    import sys

    code = ("import os, torch\n"
            "torch.set_num_threads(2)\n"
            "from grpo_run.core.rollout.advantages import group_advantages, groups_with_spread\n"
            "r = torch.rand(16, 8, dtype=torch.float64)\n"
            "before = len(os.listdir('/proc/self/task'))\n"
            "groups_with_spread(r); group_advantages(r)\n"
            "print(len(os.listdir('/proc/self/task')) - before)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0"
