"""`grpo-run sweep` against the same variants run one by one, driven as a user drives them (the
``grpo-run`` command in subprocesses). Prints figures; asserts nothing.

    python bench/bench_sweep.py [--parts embedded,smollm2] [--steps 3] [--shapes 2x8,8x8]
        [--seeds 1,2] [--lrs 1e-4,3e-4] [--threads 2] [--response-length 48] [--probe-steps N] [--keep DIR]
    python bench/bench_sweep.py --quick        # the same figures at toy sizes, in a few minutes

``embedded``: examples/arithmetic.toml with LoRA r=8, ``--vary optim.lr=1e-3,3e-3``, ``--embedded-steps``
(3) steps at one thread: the sweep's wall time against its two lone runs together, and each
variant's ``reward/mean`` against its lone run's (step 1, and the largest difference over the steps).

``smollm2``: examples/smollm2-arithmetic.toml with LoRA r=8, ``--vary run.seed=...`` and
``--vary optim.lr=...`` (2 x 2 = 4 variants), ``--steps`` steps, no evaluation, at each ``--shapes``
P x S (prompts x samples per prompt, per variant). Per shape: the sweep's wall time against the
lone runs together, and against this machine's bound for a sweep -- one start-up, one generation
phase at the batched size, one learner phase per variant -- built from the lone runs' own phase
timings (``metrics.jsonl``): start-up is a lone run's wall time less its loop's (``perf/elapsed_s``
at its last step; it includes loading, the engine, the first checkpoint's writing and closing),
the learner phase a step's ``perf/learner_s + perf/sync_s``, and the generation phase at the
batched size the median ``perf/generation_s`` of a lone run of V x P prompts (V variants; the lone
run of that shape when one was made, else one of ``--probe-steps`` steps, default ``--steps``: its
first step samples with the base model alone, its later ones with the adapter, beside the
learner). The sweep's learner takes the variants' steps in turn on the shared base, so the bound
counts one learner phase per variant. Peak RSS: the ``grpo-run`` process's, and the sum over its
whole process tree (scoring workers included), sampled every 0.2 s.

Runs take turns in one order (the lone runs, then the sweep) after a warm-up that converts the
SmolLM2 model once. Needs peft (``grpo-run[peft]``) and, for ``smollm2``, the model
(``make setup-heavy``, docs/real-model.md). ``--keep DIR`` keeps the run directories in DIR.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
EMBEDDED = ROOT / "examples" / "arithmetic.toml"
SMOLLM2 = ROOT / "examples" / "smollm2-arithmetic.toml"
QUIET = ["--set", "logging.progress=false"]


class Finished:
    """One ``grpo-run`` command's wall time, peak memory and output directory."""

    def __init__(self, wall_s: float, peak_main_mib: float, peak_tree_mib: float, directory: Path) -> None:
        self.wall_s, self.directory = wall_s, directory
        self.peak_main_mib, self.peak_tree_mib = peak_main_mib, peak_tree_mib


def grpo_run(args: list[str], directory: Path) -> Finished:
    """Run ``grpo-run ARGS`` (``python -m grpo_run``), its output in ``directory``/../<name>.out."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    log = directory.parent / f"{directory.name}.out"
    peaks = {"main": 0, "tree": 0}
    start = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "grpo_run", *args], stdout=out, stderr=subprocess.STDOUT)
        done = threading.Event()

        def sample() -> None:
            try:
                top = psutil.Process(proc.pid)
            except psutil.NoSuchProcess:
                return
            while not done.is_set():
                try:
                    main = top.memory_info().rss
                    tree = main + sum(_rss(child) for child in top.children(recursive=True))
                except psutil.NoSuchProcess:
                    return
                peaks["main"], peaks["tree"] = max(peaks["main"], main), max(peaks["tree"], tree)
                done.wait(0.2)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        code = proc.wait()
        wall = time.perf_counter() - start
        done.set()
        sampler.join()
    if code != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        raise SystemExit(f"grpo-run {' '.join(args)} exited {code}; the end of {log}:\n{tail}")
    return Finished(wall, peaks["main"] / 2**20, peaks["tree"] / 2**20, directory)


def _rss(process: psutil.Process) -> int:
    try:
        return process.memory_info().rss
    except psutil.NoSuchProcess:
        return 0


def rows(run_dir: Path) -> list[dict]:
    """The run's step rows (step >= 1) of ``metrics.jsonl``."""
    out = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in out if r.get("step", 0) >= 1 and "perf/step_s" in r]


def start_up_s(run: Finished) -> float:
    """The run's wall time outside its loop."""
    return run.wall_s - rows(run.directory)[-1]["perf/elapsed_s"]


def learner_phases(run_dir: Path) -> list[float]:
    return [r.get("perf/learner_s", 0.0) + r.get("perf/sync_s", 0.0) for r in rows(run_dir)]


def rewards(run_dir: Path) -> list[float]:
    return [r["reward/mean"] for r in rows(run_dir)]


def variant_dirs(sweep_dir: Path) -> dict[tuple, Path]:
    """Each variant's run directory, by its values (sorted ``(key, value)`` pairs) in ``sweep.json``."""
    variants = json.loads((sweep_dir / "sweep.json").read_text())["variants"]
    return {_values(v["overrides"]): sweep_dir / v["run_dir"] for v in variants}


def _values(overrides: dict) -> tuple:
    return tuple(sorted((k, float(v)) for k, v in overrides.items()))


def compared(sweep_dir: Path, lone: dict[tuple, Finished]) -> tuple[bool, float]:
    """(every variant's step-1 reward/mean equal to its lone run's, the largest difference over
    the steps of every variant); ``lone``: the lone runs by their values."""
    same, worst = True, 0.0
    dirs = variant_dirs(sweep_dir)
    for values, run in lone.items():
        ours, alone = rewards(dirs[values]), rewards(run.directory)
        same &= bool(ours) and bool(alone) and ours[0] == alone[0]
        worst = max([worst] + [abs(a - b) for a, b in zip(ours, alone)])
    return same, worst


def embedded(args: argparse.Namespace, work: Path) -> list[str]:
    common = [*QUIET, "--set", "model.lora.r=8", "--set", f"train.total_steps={args.embedded_steps}",
              "--set", "train.num_threads=1"]
    lrs = ["1e-3", "3e-3"]
    lone = {_values({"optim.lr": lr}): grpo_run([str(EMBEDDED), "--output-dir", str(work / f"lone-{lr}"),
                                         "--set", f"optim.lr={lr}", *common], work / f"lone-{lr}") for lr in lrs}
    sweep = grpo_run(["sweep", str(EMBEDDED), "--vary", f"optim.lr={','.join(lrs)}", "--output-dir",
                      str(work / "sweep"), *common], work / "sweep")
    variants = json.loads((work / "sweep" / "sweep.json").read_text())["variants"]
    same, worst = compared(work / "sweep", lone)
    together = sum(r.wall_s for r in lone.values())
    return [
        f"embedded example, LoRA r=8, --vary optim.lr=1e-3,3e-3, {_steps(args.embedded_steps)}, 1 thread",
        f"  lone runs: {' + '.join(f'{r.wall_s:.1f}' for r in lone.values())} = {together:.1f} s; "
        f"sweep {sweep.wall_s:.1f} s ({len(variants)} run dirs, "
        f"{', '.join(v['status'] for v in variants)}): {sweep.wall_s / together:.2f}x (target <= 0.85x)",
        f"  reward/mean: step 1 identical to the lone runs' {'yes' if same else 'NO'}; "
        f"largest difference over the steps {worst:.4f} (target <= 0.05)",
    ]


def smollm2(args: argparse.Namespace, work: Path, shape: tuple[int, int], shapes: list[str],
            cache: dict) -> list[str]:
    prompts, samples = shape
    seeds, lrs = args.seeds.split(","), args.lrs.split(",")
    count = len(seeds) * len(lrs)

    def lone_run(seed: str, lr: str, n_prompts: int, steps: int) -> Finished:
        key = (seed, lr, n_prompts, samples, steps)
        if key not in cache:
            name = f"lone-{n_prompts}x{samples}-seed{seed}-lr{lr}"
            cache[key] = grpo_run([str(SMOLLM2), "--output-dir", str(work / name), "--set", f"run.seed={seed}",
                                   "--set", f"optim.lr={lr}", *smollm2_common(args, n_prompts, samples, steps)],
                                  work / name)
        return cache[key]

    lone = {_values({"run.seed": seed, "optim.lr": lr}): lone_run(seed, lr, prompts, args.steps)
            for seed in seeds for lr in lrs}
    name = f"sweep-{prompts}x{samples}"
    sweep = grpo_run(["sweep", str(SMOLLM2), "--vary", f"run.seed={args.seeds}", "--vary", f"optim.lr={args.lrs}",
                      "--output-dir", str(work / name), *smollm2_common(args, prompts, samples, args.steps)],
                     work / name)
    # A lone run of the batched shape: one of the lone runs when --shapes has that shape too.
    batched = f"{count * prompts}x{samples}"
    probe = lone_run(seeds[0], lrs[0], count * prompts,
                     args.steps if batched in shapes or not args.probe_steps else args.probe_steps)
    generation = statistics.median(r["perf/generation_s"] for r in rows(probe.directory))
    start = statistics.median(start_up_s(r) for r in lone.values())
    learner = [sum(step) for step in zip(*(learner_phases(r.directory) for r in lone.values()))]
    bound = start + len(learner) * generation + sum(learner)
    together = sum(r.wall_s for r in lone.values())
    same, worst = compared(work / name, lone)
    lone_gen = statistics.median(r["perf/generation_s"] for run in lone.values() for r in rows(run.directory))
    lone_learn = statistics.median(x for run in lone.values() for x in learner_phases(run.directory))
    dirs = variant_dirs(work / name).values()
    sweep_steps = [r["perf/step_s"] for d in dirs for r in rows(d)]
    sweep_gen = [r["perf/generation_s"] for d in dirs for r in rows(d)]
    peak_main = max(r.peak_main_mib for r in lone.values())
    peak_tree = max(r.peak_tree_mib for r in lone.values())
    return [
        f"SmolLM2-135M, LoRA r=8, {prompts} prompts x {samples} samples per variant, {count} variants "
        f"(run.seed={args.seeds} x optim.lr={args.lrs}), {_steps(args.steps)}, {args.threads} threads",
        f"  lone runs: {' + '.join(f'{r.wall_s:.1f}' for r in lone.values())} = {together:.1f} s; sweep "
        f"{sweep.wall_s:.1f} s: {sweep.wall_s / together:.2f}x (target at 2x8: <= 0.6x)",
        f"  lone run phases (medians): start-up {start:.1f} s, generation {lone_gen:.2f} s, "
        f"learner+sync {lone_learn:.2f} s a step",
        f"  bound: start-up {start:.1f} + {len(learner)} x generation at {count * prompts}x{samples} "
        f"{generation:.2f} (lone run of that shape, median of {len(rows(probe.directory))} steps) + learner phases "
        f"{sum(learner):.1f} ({count} variants x {len(learner)} steps) = {bound:.1f} s; sweep / bound "
        f"{sweep.wall_s / bound:.2f} (target <= 1.15)",
        f"  sweep: step {statistics.median(sweep_steps):.2f} s, shared generation {statistics.median(sweep_gen):.2f} s "
        f"(medians over variants and steps)",
        f"  peak RSS: lone run {peak_main:.0f} MiB (process tree {peak_tree:.0f}), sweep {sweep.peak_main_mib:.0f} MiB "
        f"(tree {sweep.peak_tree_mib:.0f}): {sweep.peak_main_mib / peak_main:.2f}x "
        f"(tree {sweep.peak_tree_mib / peak_tree:.2f}x; target <= 1.5x)",
        f"  reward/mean: step 1 identical to the lone runs' {'yes' if same else 'NO'}; largest difference over the "
        f"steps {worst:.4f}",
    ]


def _steps(count: int) -> str:
    return f"{count} step" + ("s" if count != 1 else "")


def smollm2_common(args: argparse.Namespace, prompts: int, samples: int, steps: int) -> list[str]:
    return [*QUIET, "--set", "model.lora.r=8", "--set", "model.lora.alpha=16",
            "--set", f"rollout.num_unique_prompts_rollout={prompts}",
            "--set", f"rollout.num_samples_per_prompt_rollout={samples}",
            "--set", f"rollout.response_length={args.response_length}",
            "--set", f"train.total_steps={steps}", "--set", "train.local_eval_every=0",
            "--set", f"train.num_threads={args.threads}"]


def warm_up() -> None:
    """Convert the SmolLM2 model once (its first use), outside every timing."""
    code = ("from grpo_run.core.plugins.host import build_plugin_host\n"
            "s = build_plugin_host().registry.get('model', 'smollm2-135m-instruct')\n"
            "print(s(s.Config()).resolve())")
    subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="embedded,smollm2")
    parser.add_argument("--embedded-steps", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3, help="SmolLM2 runs' steps")
    parser.add_argument("--shapes", default="2x8,8x8", help="prompts x samples per variant, comma-separated")
    parser.add_argument("--seeds", default="1,2")
    parser.add_argument("--lrs", default="1e-4,3e-4")
    parser.add_argument("--threads", type=int, default=2, help="train.num_threads of the SmolLM2 runs")
    parser.add_argument("--response-length", type=int, default=48)
    parser.add_argument("--probe-steps", type=int, default=0,
                        help="steps of the lone run at the batched size, when no lone run has that shape "
                             "(0: --steps)")
    parser.add_argument("--quick", action="store_true",
                        help="toy sizes: 1 embedded step, SmolLM2 at 1x4 with 8 tokens, 1 step")
    parser.add_argument("--keep", help="keep the run directories here")
    args = parser.parse_args()
    if args.quick:
        args.embedded_steps, args.steps, args.shapes, args.response_length, args.probe_steps = 1, 1, "1x4", 8, 1
    parts = args.parts.split(",")
    print(f"bench_sweep: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)
    if "smollm2" in parts:
        warm_up()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.keep) if args.keep else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        if "embedded" in parts:
            for line in embedded(args, work / "embedded"):
                print(line, flush=True)
        cache: dict = {}
        if "smollm2" in parts:
            shapes = args.shapes.split(",")
            for text in shapes:
                prompts, samples = (int(x) for x in text.split("x"))
                for line in smollm2(args, work / "smollm2", (prompts, samples), shapes, cache):
                    print(line, flush=True)
    print(f"load average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
