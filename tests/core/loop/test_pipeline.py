"""The live pipeline state: the monitor's snapshot and file, the stages a batch passes through in
the real loop (with fakes), and the producer telling generation from scoring."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from support.scoring_helpers import ExactVerifier

from grpo_run import Completion, SamplingParams, VerifierConfig
from grpo_run.core.loop.observers import StepEvent
from grpo_run.core.loop.pipeline import PIPELINE_FILE, PipelineMonitor, read_pipeline
from grpo_run.core.loop.scheduler import LoopParts, LoopSettings, TrainingLoop
from grpo_run.core.plugins.types import NoConfig
from grpo_run.core.rollout.producer import RolloutProducer
from grpo_run.core.rollout.sequences import RolloutBatch, RolloutGroup
from grpo_run.core.scoring.scorer import RewardScorer


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_snapshot_counts_stages_and_staleness_and_the_file_follows(tmp_path: Path) -> None:
    clock = Clock()
    monitor = PipelineMonitor(tmp_path, total_steps=10, async_steps=2, clock=clock)
    assert read_pipeline(tmp_path)["stages"] == {"generating": 0, "scoring": 0, "ready": 0, "training": 0}
    monitor.batch_started(1, policy_version=0)
    monitor.batch_started(2, policy_version=0)
    monitor.batch_phase(1, "scoring")
    clock.now += 2.5
    monitor.batch_phase(1, "ready")
    monitor.batch_phase(1, "training")
    monitor.batch_phase(1, "scoring")  # a late callback never moves a batch back
    monitor.on_step(StepEvent(1, {"reward/mean": 0.25, "perf/step_s": 3.0, "loss/total": 9.0, "eval/accuracy": float("nan")}))
    monitor.engine_synced(1)
    clock.now += 1.0
    snap = read_pipeline(tmp_path)  # as written on the last change, a second ago
    assert snap["updated"] == 1002.5
    assert snap["stages"] == {"generating": 1, "scoring": 0, "ready": 0, "training": 1}
    assert snap["batches"] == [
        {"index": 1, "phase": "training", "policy_version": 0, "staleness": 1, "in_phase_s": 0.0},
        {"index": 2, "phase": "generating", "policy_version": 0, "staleness": 1, "in_phase_s": 2.5},
    ]
    assert [b["in_phase_s"] for b in monitor.snapshot()["batches"]] == [1.0, 3.5]
    assert (snap["step"], snap["engine_version"], snap["status"]) == (1, 1, "running")
    assert snap["last_metrics"] == {"reward/mean": 0.25, "perf/step_s": 3.0}  # curated, finite only
    monitor.batch_done(1)
    monitor.weights_published(2)
    monitor.evaluating(True)
    now = read_pipeline(tmp_path)
    assert (now["step"], now["evaluating"], now["batches"][0]["staleness"]) == (2, True, 2)
    monitor.on_run_end("interrupted", KeyboardInterrupt())
    final = json.loads((tmp_path / PIPELINE_FILE).read_text())
    assert final["status"] == "interrupted" and final["batches"] == [] and final["evaluating"] is False
    assert sorted(p.name for p in tmp_path.iterdir()) == [PIPELINE_FILE]  # no temporary file left


# -- in the loop ------------------------------------------------------------------------------


class _Engine:
    def __init__(self) -> None:
        self.version = 0

    async def update_weights(self, state_dict: Any, version: int) -> None:
        self.version = version


class _Producer:
    def __init__(self, engine: _Engine) -> None:
        self.engine = engine

    def rollout_state(self) -> dict[str, Any]:
        return {}

    async def produce(self, index: int) -> RolloutBatch:
        version = self.engine.version
        await asyncio.sleep(0.05)
        comp = Completion(token_ids=(3,), logprobs=(-1.0,), text="x", finish_reason="stop", policy_version=version)
        group = RolloutGroup(row={"id": "p"}, prompt_ids=[1], completions=[comp, comp], rewards=[0.0, 1.0], max_reward=1.0)
        return RolloutBatch(index, [group], 0.05, {})


class _Learner:
    def train_step(self, seqs: Any) -> dict[str, float]:
        time.sleep(0.05)
        return {}

    def skip_step(self) -> None:
        pass

    def weights_snapshot(self) -> dict[str, int]:
        return {}


class RecordingMonitor(PipelineMonitor):
    def __init__(self, run_dir: Path) -> None:
        self.history: list[dict[str, Any]] = []
        super().__init__(run_dir, total_steps=5, async_steps=2)

    def write(self) -> None:
        self.history.append(self.snapshot())
        super().write()


def test_the_loop_moves_each_batch_through_the_stages(tmp_path: Path) -> None:
    engine = _Engine()
    monitor = RecordingMonitor(tmp_path)
    loop = TrainingLoop(LoopParts(_Producer(engine), _Learner(), engine),
                        LoopSettings(total_steps=5, async_steps=2), [monitor], pipeline=monitor)
    asyncio.run(loop.run())
    phases: dict[int, list[str]] = {}
    for snap in monitor.history:
        for b in snap["batches"]:
            seen = phases.setdefault(b["index"], [])
            if not seen or seen[-1] != b["phase"]:
                seen.append(b["phase"])
    assert phases == {i: ["generating", "ready", "training"] for i in range(1, 6)}
    assert max(len(s["batches"]) for s in monitor.history) == 2  # async_steps = 2: two in flight
    assert max(b["staleness"] for s in monitor.history for b in s["batches"]) == 1
    assert monitor.history[-1]["batches"] == [] and monitor.history[-1]["step"] == 5
    versions = [s["engine_version"] for s in monitor.history]
    # Batch i starts once the learner reaches i - 2 and takes the newest weights: 1, 2, 3 for 3..5.
    assert versions == sorted(versions) and sorted(set(versions)) == [0, 1, 2, 3]


def test_the_producer_tells_generation_from_scoring(tmp_path: Path) -> None:
    class Engine:
        async def generate(self, prompts, params: SamplingParams) -> list[list[Completion]]:
            seen.append(("generate", None))
            return [[Completion((1,), (0.0,), "1", "stop", 0) for _ in range(params.n)] for _ in prompts]

    class Sampler:
        name, Config = "s", NoConfig

        def sample(self, n: int) -> list[dict]:
            return [{"id": f"r{i}", "prompt": "q", "ground_truth": "1", "verifier": "exact"} for i in range(n)]

        def state_dict(self) -> dict:
            return {}

        def load_state_dict(self, state: dict) -> None:
            pass

    class Encoder:
        def encode(self, row: Any) -> list[int]:
            return [7]

    seen: list[tuple[str, Any]] = []
    scorer = RewardScorer({"exact": (ExactVerifier, VerifierConfig())}, num_workers=0)
    producer = RolloutProducer(Sampler(), Engine(), scorer, Encoder(), SamplingParams(n=2), num_prompts=3)
    producer.phase_listener = lambda index, phase: seen.append((phase, index))
    batch = asyncio.run(producer.produce(4))
    assert seen == [("generating", 4), ("generate", None), ("scoring", 4)]
    assert 0.0 <= batch.scoring_tail_s <= batch.generation_s
    assert [g.rewards for g in batch.groups] == [[1.0, 1.0]] * 3
