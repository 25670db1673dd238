"""Step time with one learner process vs 2-rank learners, and the per-step overhead of Ray actors.

    python bench/bench_distributed.py [--preset embedded|bench-small] [--steps N] [--variants a,b,...]

Variants (``name``: placement, strategy):
``single``      local, one process (the default run)
``ddp``         local, 2 rank processes, torch DDP over gloo
``fsdp2``       local, 2 rank processes, torch fully_shard over gloo
``zero2``       local, 2 rank processes, DeepSpeed ZeRO-2 (needs the deepspeed extra)
``ray-single``  Ray: one learner actor (strategy single, all the machine's CPUs) and one engine actor
``ray-ddp``     Ray: 2 learner actors (ddp) and one engine actor

Prints, per variant, the median over the steps after the first of seconds per step, learner
seconds and generation seconds; the Ray overhead is ``ray-single`` minus ``single`` per step
(actor calls, rollouts into the object store, weights out of it). Asserts nothing. On a 2-core
machine two ranks share the cores the single process had: expect no speed-up here, only the cost
of the collectives.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_step import _config, _register_bench_model  # noqa: E402 - the presets live there

VARIANTS = {
    "single": {},
    "ddp": {"learner": {"num_learners": 2, "strategy": "ddp"}},
    "fsdp2": {"learner": {"num_learners": 2, "strategy": "fsdp2"}},
    "zero2": {"learner": {"num_learners": 2, "strategy": "deepspeed", "zero_stage": 2}},
    # The learner actor gets the machine's cores, as the one-process run's learner has them (an
    # actor's torch threads follow its num_cpus, 1 by default): the difference is then Ray's.
    "ray-single": {"distributed": {"backend": "ray", "learner_resources": {"num_cpus": os.cpu_count() or 1}}},
    "ray-ddp": {"distributed": {"backend": "ray"}, "learner": {"num_learners": 2, "strategy": "ddp"}},
}


def run_variant(preset: str, steps: int, name: str) -> dict[str, float]:
    from grpo_run.core.config import parse_config
    from grpo_run.core.loop.run import train
    from grpo_run.core.plugins.host import build_plugin_host

    host = build_plugin_host()
    if preset == "bench-small":
        _register_bench_model(host)
    data = _config(preset, steps, 1)
    for section, values in VARIANTS[name].items():
        data.setdefault(section, {}).update(values)
    cfg = parse_config(data, host.registry, source=f"bench {name}")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        train(cfg, host, Path(tmp))
        rows = [json.loads(line) for line in (Path(tmp) / "metrics.jsonl").read_text().splitlines()]
    total = time.perf_counter() - started
    rows = [r for r in rows if r["step"] >= 2]  # step 1 pays one-off costs

    def med(key: str) -> float:
        return statistics.median(r[key] for r in rows)

    return {"step_s": med("perf/step_s"), "learner_s": med("perf/learner_s"),
            "generation_s": med("perf/generation_s"), "total_s": total}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=["embedded", "bench-small"], default="embedded")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args()
    names = [n for n in args.variants.split(",") if n]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {', '.join(VARIANTS)}")
    results = {}
    for name in names:
        try:
            results[name] = run_variant(args.preset, args.steps, name)
        except Exception as exc:  # a missing extra: report and go on
            print(f"{name}: skipped ({type(exc).__name__}: {exc})", file=sys.stderr)
    print(f"preset {args.preset}, {args.steps} steps, medians over steps 2..{args.steps}")
    print(f"{'variant':<12} {'s/step':>8} {'learner s':>10} {'gen s':>8} {'wall s':>8}")
    for name, r in results.items():
        print(f"{name:<12} {r['step_s']:8.3f} {r['learner_s']:10.3f} {r['generation_s']:8.3f} {r['total_s']:8.1f}")
    if "single" in results and "ray-single" in results:
        overhead = results["ray-single"]["step_s"] - results["single"]["step_s"]
        print(f"Ray overhead per step (ray-single - single): {overhead * 1000:+.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
