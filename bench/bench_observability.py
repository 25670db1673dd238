"""What observing a run costs: writing one step's rollout trace, one pipeline.json update, and
drawing the report and a live plot from a long metrics file. Prints medians of repeated runs.

    .venv/bin/python bench/bench_observability.py
"""

from __future__ import annotations

import json
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch

from grpo_run import Completion
from grpo_run.cli.plots import panel, render
from grpo_run.cli.report import write_report
from grpo_run.cli.rundir import load_metrics
from grpo_run.core.config.schema import AlgorithmSection
from grpo_run.core.loop.observers import StepEvent
from grpo_run.core.loop.pipeline import PipelineMonitor
from grpo_run.core.loop.traces import TraceWriter, train_traces
from grpo_run.core.rollout.sequences import RolloutBatch, RolloutGroup, group_signal

PROMPTS, G, TOKENS, STEPS = 16, 8, 32, 1000


def median_s(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def batch() -> RolloutBatch:
    rng = random.Random(0)
    groups = []
    for p in range(PROMPTS):
        comps = [Completion(tuple(range(TOKENS)), (-0.5,) * TOKENS, "x" * TOKENS, "stop", 3) for _ in range(G)]
        groups.append(RolloutGroup({"id": f"r{p}", "ground_truth": str(p)}, list(range(24)), comps,
                                   [float(rng.random() < 0.5) for _ in range(G)], 1.0, [{"math": 0.0}] * G))
    return RolloutBatch(4, groups, 1.0, {})


def metrics_file(run_dir: Path) -> None:
    rng = random.Random(0)
    with (run_dir / "metrics.jsonl").open("w") as fh:
        for step in range(1, STEPS + 1):
            row = {"step": step, "reward/mean": rng.random(), "reward/solve_rate": rng.random(),
                   "rollout/stop_rate": rng.random(), "rollout/response_length_mean": 30 * rng.random(),
                   "perf/generation_s": 1.0, "perf/scoring_tail_s": 0.1, "perf/learner_s": 0.6, "perf/sync_s": 0.01,
                   "perf/step_s": 1.2, "perf/generation_tokens_per_s": 4000.0, "rollout/staleness_mean": 1.0,
                   "rollout/real_batch_size_ratio": rng.random(), "loss/policy": rng.random(), "loss/clip_frac_high": 0.01}
            if step % 10 == 0:
                row.update({"eval/accuracy": rng.random(), "eval/pass@1": rng.random(), "eval/pass@4": rng.random()})
            fh.write(json.dumps(row) + "\n")


def main() -> None:
    torch.set_num_threads(1)
    b = batch()
    event = StepEvent(4, {}, None, b, group_signal(b, AlgorithmSection()))
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp)
        writer = TraceWriter(run_dir, 1, 8_000_000, lambda ids: "p" * len(ids))
        trace_s = median_s(lambda: writer.write("train", 4, train_traces(event, writer.decode)), 50)
        monitor = PipelineMonitor(run_dir, 100, 2)
        monitor.batch_started(1, 0)
        pipeline_s = median_s(monitor.write, 200)
        metrics_file(run_dir)
        render(panel("reward"), load_metrics(run_dir))  # warm matplotlib's font cache
        plot_s = median_s(lambda: render(panel("reward"), load_metrics(run_dir)), 5)
        report_s = median_s(lambda: write_report(run_dir), 3)
    print(f"trace of one step ({PROMPTS} prompts x {G} completions): {1000 * trace_s:.2f} ms")
    print(f"pipeline.json update:                           {1000 * pipeline_s:.3f} ms")
    print(f"live reward plot from {STEPS} steps:                {1000 * plot_s:.0f} ms")
    print(f"report of {STEPS} steps (all panels + html):        {report_s:.2f} s")


if __name__ == "__main__":
    main()
