"""Where the time of a training step goes: torch.profiler over a few steps of a bench_step preset.

    python bench/profile_step.py [--preset bench-small|embedded] [--steps N] [--threads T]
                                 [--async-steps K] [--rows R]

Stages are labelled with ``record_function`` (learner step, generate call, scoring call) so the
table shows each stage's total next to the operators inside it. The first step is not profiled
(one-off costs). torch.profiler sees only the thread that started it, so the stages that normally
run in worker threads (generation, the learner step) run inline here; with ``async_steps = 1`` the
loop is sequential anyway. Prints the top operators by self CPU time; asserts nothing.
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_step import _config, _register_bench_model  # noqa: E402


def _label(cls: type, method: str, label: str) -> None:
    """Wrap ``cls.method`` in a profiler range named ``label`` (sync or async)."""
    original = getattr(cls, method)
    if hasattr(original, "__wrapped__"):
        return
    import inspect

    if inspect.iscoroutinefunction(original):

        @functools.wraps(original)
        async def wrapper(*args, **kwargs):
            with torch.profiler.record_function(label):
                return await original(*args, **kwargs)
    else:

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            with torch.profiler.record_function(label):
                return original(*args, **kwargs)

    setattr(cls, method, wrapper)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=["embedded", "bench-small"], default="bench-small")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--async-steps", type=int, default=1)
    parser.add_argument("--rows", type=int, default=40, help="operators to print")
    parser.add_argument("--threaded", action="store_true", help="keep worker threads (their ops go unseen)")
    args = parser.parse_args()

    from grpo_run.core.config import parse_config
    from grpo_run.core.learner.learner import Learner
    from grpo_run.core.loop.run import train
    from grpo_run.core.plugins.host import build_plugin_host
    from grpo_run.core.scoring.scorer import RewardScorer
    from grpo_run.plugins.engines.hf import HFEngine

    _label(Learner, "train_step", "stage/learner")
    _label(HFEngine, "generate_sync", "stage/generate")
    _label(RewardScorer, "score", "stage/score")

    host = build_plugin_host()
    if args.preset == "bench-small":
        _register_bench_model(host)
    data = _config(args.preset, args.steps + 1, args.async_steps)
    data["train"]["num_threads"] = args.threads
    cfg = parse_config(data, host.registry, source="profile")

    from grpo_run.core.loop import observers

    state = {"prof": None}
    original_emit = observers.emit

    def emit(obs, event):  # start profiling once step 1 is done
        original_emit(obs, event)
        if event.step == 1 and state["prof"] is None:
            state["prof"] = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
            state["prof"].__enter__()

    import grpo_run.core.loop.scheduler as scheduler

    scheduler.emit = emit
    if not args.threaded:
        # torch.profiler records the thread that started it: run the worker-thread stages inline.
        import asyncio

        async def inline(func, /, *a, **kw):
            return func(*a, **kw)

        asyncio.to_thread = inline
    with tempfile.TemporaryDirectory() as tmp:
        train(cfg, host, Path(tmp))
    prof = state["prof"]
    prof.__exit__(None, None, None)
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows, max_name_column_width=48)
    print(table)
    stages = {e.key: e.cpu_time_total / 1e6 for e in prof.key_averages() if e.key.startswith("stage/")}
    for key, seconds in sorted(stages.items()):
        print(f"{key:<20} {seconds / args.steps:8.3f} s/step (wall, inside the range)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
