"""The token budget bounds a learner step's memory: with the default ``learner.max_tokens_per_forward``
a step over 3x the tokens peaks at most 1.3x the 1x step's RSS; without a budget the same step
grows with the batch (the bound is the budget's doing, not the model's size).

Each step runs in a fresh process (``bench/bench_learner_memory.py --worker``; its high-water RSS),
on a deep, narrow model whose activations dominate the peak (~1.1 GiB at 1x).
"""

from __future__ import annotations

import importlib.util
import sys

import pytest

from support.paths import REPO


spec = importlib.util.spec_from_file_location("bench_learner_memory", REPO / "bench" / "bench_learner_memory.py")
bench = importlib.util.module_from_spec(spec)
sys.modules["bench_learner_memory"] = bench
spec.loader.exec_module(bench)

pytestmark = pytest.mark.slow


def test_peak_memory_stays_flat_with_the_default_budget_and_grows_without() -> None:
    budget = 16384  # the budget before "auto" became the default: a number set by the user
    one = bench.measure(bench.SCALE_1, budget)
    assert one["tokens"] <= budget and one["micro_batches"] == 1
    three = bench.measure(3 * bench.SCALE_1, budget)
    assert three["micro_batches"] >= 3
    assert three["peak_rss_mb"] <= 1.3 * one["peak_rss_mb"], (one, three)

    unbounded = bench.measure(3 * bench.SCALE_1, 0)
    assert unbounded["micro_batches"] == 1
    assert unbounded["peak_rss_mb"] >= 1.6 * one["peak_rss_mb"], (one, unbounded)
