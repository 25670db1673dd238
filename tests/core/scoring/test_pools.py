"""A verifier with a worker of its own (:class:`grpo_run.OwnWorker`): one process holds it,
apart from the shared workers, and gets its batches whole; ``pipeline.json``'s placement says so."""

from __future__ import annotations

import asyncio
import os

from support.rescaled_verifiers import OwnRawConfig, Pid, RawConfig, RawNumber

from grpo_run import VerifierConfig
from grpo_run.core.scoring.scorer import RewardScorer

ROWS = [{"id": f"r{i}", "verifier": ["raw-number", "pid"], "ground_truth": [None, None]} for i in range(10)]


def run(config, num_workers: int, **options):
    """(where the verifiers ran, the scored batch)."""
    specs = {"raw-number": (RawNumber, config), "pid": (Pid, VerifierConfig())}
    with RewardScorer(specs, num_workers=num_workers, chunk_size=1, **options) as scorer:
        batch = asyncio.run(scorer.score(ROWS, [str(i) for i in range(10)]))
        return scorer.placement(), batch


def test_a_verifier_with_its_own_worker_runs_apart_and_gets_its_batches_whole() -> None:
    (own, shared), batch = run(OwnRawConfig(), num_workers=2)
    report = batch.stats.report()
    assert own["verifiers"] == ["raw-number"] and own["where"] == "worker processes of its own"
    assert shared["verifiers"] == ["pid"] and shared["where"] == "worker processes"
    assert len(own["pids"]) == 1 and len(shared["pids"]) == 2 and not set(own["pids"]) & set(shared["pids"])
    assert report["verifier/raw-number/pid"] == own["pids"][0]  # every call in that one process
    assert report["verifier/raw-number/batch"] == 10  # one batch of 10, not split over 2 workers
    assert [r.scores["raw-number"] for r in batch] == [2.0 * i for i in range(10)]


def test_without_one_the_batches_are_split_over_the_shared_workers() -> None:
    (shared,), batch = run(RawConfig(), num_workers=2)
    assert shared == {"verifiers": ["raw-number", "pid"], "where": "worker processes", "pids": shared["pids"]}
    assert batch.stats.report()["verifier/raw-number/batch"] == 5


def test_the_config_caps_the_batch_size_and_num_workers_0_keeps_everything_here() -> None:
    placement, batch = run(OwnRawConfig(batch=3), num_workers=0)
    assert placement == [{"verifiers": ["raw-number", "pid"], "where": "training process", "pids": [os.getpid()]}]
    assert batch.stats.report()["verifier/raw-number/batch"] == (3 * 9 + 1) / 10  # batches of 3, 3, 3, 1


def test_its_own_worker_is_not_recycled_with_the_shared_ones() -> None:
    # Recycling after every call is for the shared workers; the own worker keeps its model.
    (own, _shared), batch = run(OwnRawConfig(), num_workers=2, max_calls_per_worker=1)
    assert len(own["pids"]) == 1 and batch.stats.report()["verifier/raw-number/pid"] == own["pids"][0]
