"""Scoring throughput through :class:`grpo_run.core.scoring.scorer.RewardScorer`.

Math: batches look like the embedded default's rollouts: 16 arithmetic prompts x 8 samples,
answers in mixed formats (bare number, "the answer is", boxed, an equation, a wrong number,
garbage). Two workloads: ``unique`` (every completion new, so the verdict cache never hits) and
``rollout`` (samples of a prompt repeat, as they do once a policy converges). Worker start-up is
excluded. Target (DESIGN.md): >= 500 math checks/s on 2 cores.

Shaping: the same batches with ``format`` (gate), ``length`` and ``non_stop_penalty`` scoring
every row beside ``math`` -- what the all-rows verifiers cost on top.

Async: an ``async def`` verifier that waits 100 ms per call (a stand-in for an LLM judge; the
judge's own bench runs it against a loopback server): calls in flight at once and calls/s, to
show the scorer's async path is not a bottleneck. Target (DESIGN.md): >= 64 judge calls in flight.

    python bench/bench_scoring.py [--workers 1 2] [--batches 20] [--async-calls 256]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import time
from collections.abc import Mapping
from typing import Any, ClassVar

import structlog

from grpo_run import VerifierConfig
from grpo_run.core.scoring.scorer import RewardScorer
from grpo_run.plugins.verifiers.format import FormatVerifier
from grpo_run.plugins.verifiers.length import LengthVerifier
from grpo_run.plugins.verifiers.math import MathVerifier
from grpo_run.plugins.verifiers.non_stop_penalty import NonStopPenaltyVerifier

FORMATS = (
    "{c}",
    "{c}.",
    "{a}+{b}={c}",
    "The answer is {c}.",
    "I think it is {c}",
    "\\boxed{{{c}}}",
    "Let me add: {a} + {b} = {c}. So the answer is $\\boxed{{{c}}}$.",
    "{a} plus {b} makes {c}",
)
GARBAGE = ("", "abc", "+-+", "1 9 2", "??")


def make_batch(rng: random.Random, prompts: int, samples: int, repeat: bool) -> tuple[list[dict], list[str]]:
    """One rollout batch: ``prompts`` x ``samples`` rows and completions."""
    rows, completions = [], []
    for p in range(prompts):
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        row = {"id": f"{a}+{b}", "ground_truth": str(a + b), "verifier": "math"}
        distinct = [_completion(rng, a, b) for _ in range(3 if repeat else samples)]
        for s in range(samples):
            rows.append(row)
            completions.append(distinct[s % len(distinct)] if repeat else distinct[s])
    return rows, completions


def _completion(rng: random.Random, a: int, b: int) -> str:
    if rng.random() < 0.1:
        return rng.choice(GARBAGE)
    c = a + b if rng.random() < 0.6 else a + b + rng.choice((-10, -1, 1, 2, 10))
    return rng.choice(FORMATS).format(a=a, b=b, c=c)


async def run(workers: int, batches: int, repeat: bool, seed: int, shaping: bool = False) -> tuple[float, float]:
    """(checks/s, mean reward) over ``batches`` batches with ``workers`` worker processes."""
    rng = random.Random(seed)
    data = [make_batch(rng, 16, 8, repeat) for _ in range(batches + 1)]  # the first warms up
    specs: dict[str, tuple[type, Any]] = {"math": (MathVerifier, MathVerifier.Config())}
    if shaping:  # half the completions in the R1 format, so the gate passes some and fails some
        data = [(rows, [_r1(c) if i % 2 else c for i, c in enumerate(completions)]) for rows, completions in data]
        specs["format"] = (FormatVerifier, FormatVerifier.Config(mode="gate"))
        length = LengthVerifier.Config(unit="chars", target=20, max_length=60, overlong_buffer=20)
        specs["length"] = (LengthVerifier, length)
        specs["non_stop_penalty"] = (NonStopPenaltyVerifier, NonStopPenaltyVerifier.Config())
    warm_up, data = data[0], data[1:]
    with RewardScorer(specs, num_workers=workers, timeout_s=5.0) as scorer:
        scorer.start()
        await scorer.score(*warm_up, finish_reasons=["stop"] * len(warm_up[0]))  # imports, regexes
        scorer.pop_metrics()
        start = time.perf_counter()
        for rows, completions in data:
            await scorer.score(rows, completions, finish_reasons=["stop"] * len(rows))
        elapsed = time.perf_counter() - start
        metrics = scorer.pop_metrics()
    checks = sum(len(c) for _, c in data)
    return checks / elapsed, metrics["verifier/math/mean_score"]


def _r1(completion: str) -> str:
    return f"<think>Adding the numbers.</think>\n<answer>{completion}</answer>"


class SlowAsyncVerifier:
    """Waits ``LATENCY_S`` per call, like a remote judge; counts calls in flight."""

    name: ClassVar[str] = "slow"
    Config: ClassVar[type] = VerifierConfig
    LATENCY_S: ClassVar[float] = 0.1

    def __init__(self, config: VerifierConfig) -> None:
        self.in_flight = 0
        self.peak = 0

    async def score(self, completion: str, ground_truth: Any, row: Mapping[str, Any]) -> float:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(self.LATENCY_S)
        finally:
            self.in_flight -= 1
        return 1.0


async def run_async(calls: int) -> tuple[int, float]:
    """(peak calls in flight, calls/s) for ``calls`` async calls scored in groups of 8 at once."""
    scorer = RewardScorer({"slow": (SlowAsyncVerifier, VerifierConfig())}, num_workers=0, timeout_s=5.0)
    rows = [{"id": i, "verifier": "slow", "ground_truth": None} for i in range(8)]
    start = time.perf_counter()
    await asyncio.gather(*(scorer.score(rows, ["x"] * 8) for _ in range(calls // 8)))
    elapsed = time.perf_counter() - start
    peak = scorer._async._instances["slow"].peak  # noqa: SLF001 - a bench may look inside
    await scorer.aclose()
    return peak, (calls // 8 * 8) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--async-calls", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    for workload, repeat, shaping in (("unique", False, False), ("rollout", True, False), ("shaping", False, True)):
        for workers in args.workers:
            rate, mean = asyncio.run(run(workers, args.batches, repeat, args.seed, shaping))
            verdict = "ok" if rate >= 500 else "BELOW TARGET"
            print(f"{workload:8s} workers={workers}: {rate:7.0f} rows/s  (math mean score {mean:.2f}; target 500: {verdict})")
    peak, rate = asyncio.run(run_async(args.async_calls))
    verdict = "ok" if peak >= 64 else "BELOW TARGET"
    print(f"async    {args.async_calls} calls of {SlowAsyncVerifier.LATENCY_S * 1000:.0f} ms: {peak} in flight, "
          f"{rate:7.0f} calls/s  (target 64 in flight: {verdict})")


if __name__ == "__main__":
    main()
