"""The hf engine alone: seconds per sampling call, generated tokens/s and % of the fp32 floor,
against other grpo-run trees in alternating processes. Prints figures; asserts nothing.

    python bench/bench_hf_engine.py [--preset bench-small|smollm2] [--threads 2] [--rounds 4] [--calls 7]
                                    [--baseline-src DIR]... [--caller loading|other-thread]
    python bench/bench_hf_engine.py --draw [--threads 1]
    python bench/bench_hf_engine.py --in-run [--baseline-src DIR]...

The engine samples what a run's first rounds ask for: ``bench-small`` 16 prompts x 8 samples x at
most 32 tokens of the arithmetic task (bench_step's model), ``smollm2`` 8 x 8 x 48 of
examples/smollm2-arithmetic.toml (`make setup-heavy`); temperature 1, a seed per call. Each tree
(this one, then every ``--baseline-src``, a ``src/`` directory) runs in its own process, taking
turns for ``--rounds``; per process: the median over ``--calls`` calls after one warm-up call.
The floor: ``2 N x`` (prompt + completion tokens of every sample), N the weights of the Linear
layers, at the fp32 matmul rate measured before each round.

``--caller other-thread`` calls the engine from a thread other than the one that loaded the
model (as ``asyncio.to_thread`` around ``engine.generate`` does) and prints, per call, the
process's threads and its voluntary context switches (Linux ``/proc``): GNU OpenMP starts a second
thread pool for that thread, and its idle threads then sleep instead of spinning.

``--draw`` times one sampling step's draw at the preset's shape: ``torch.multinomial`` (what
transformers' ``generate`` calls) against the engine's inverse-CDF draw.

``--in-run`` runs a short bench-small training run per tree and prints, for each sampling call
inside it, its seconds, the thread that ran it, the process's threads, the intra-op threads and
the voluntary context switches.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_step import _config, _register_bench_model  # noqa: E402
from floor import matmul_gflops  # noqa: E402

SHAPES = {"bench-small": (16, 8, 32), "smollm2": (8, 8, 48)}


def _voluntary_switches() -> tuple[int, int]:
    """(threads in this process, voluntary context switches summed over them)."""
    total, tasks = 0, os.listdir("/proc/self/task")
    for tid in tasks:
        try:
            status = Path(f"/proc/self/task/{tid}/status").read_text()
        except FileNotFoundError:
            continue
        total += int(status.split("\nvoluntary_ctxt_switches:")[1].split()[0])
    return len(tasks), total


def _engine(preset: str):
    """The hf engine on the preset's model and its train prompts (as a run encodes them)."""
    import torch

    from grpo_run import EngineContext
    from grpo_run.core.config import parse_config
    from grpo_run.core.data.prompts import PromptEncoder
    from grpo_run.core.data.sources import load_rows
    from grpo_run.core.loop.build import load_tokenizer, resolve_model_path
    from grpo_run.core.plugins.host import build_plugin_host

    host = build_plugin_host()
    if preset == "smollm2":
        from bench_vs_trl import smollm2_config

        data = smollm2_config(2)
    else:
        _register_bench_model(host)
        data = _config("bench-small", 2, 1)
    cfg = parse_config(data, host.registry, source="bench_hf_engine")
    path = resolve_model_path(cfg, host)
    tokenizer = load_tokenizer(cfg, path)
    encoder = PromptEncoder(tokenizer, cfg.data.max_prompt_token_length, cfg.data.apply_chat_template)
    prompts = [encoder.encode(row) for row in load_rows(cfg, host.registry).train[:256]]
    cls = host.registry.get("engine", "hf")
    engine = cls(cls.Config(), EngineContext(model_path=path, tokenizer=tokenizer, dtype=torch.float32,
                                             device="cpu", seed=1))
    weights = sum(m.weight.numel() for m in engine.model.modules() if isinstance(m, torch.nn.Linear))
    return engine, prompts, weights


def worker(args: argparse.Namespace) -> dict:
    """One process: ``--calls`` timed sampling calls after a warm-up call."""
    import torch

    from grpo_run import SamplingParams

    torch.set_num_threads(args.threads)
    engine, prompts, weights = _engine(args.preset)
    count, n, tokens = SHAPES[args.preset]
    record: list[tuple[float, int, int, int]] = []

    def calls() -> None:
        for i in range(args.calls + 1):
            chunk = prompts[(i * count) % len(prompts):][:count]
            params = SamplingParams(n=n, max_new_tokens=tokens, temperature=1.0, seed=i)
            threads, before = _voluntary_switches()
            start = time.perf_counter()
            out = engine.generate_sync(chunk, params)
            seconds = time.perf_counter() - start
            threads, after = _voluntary_switches()
            total = sum(n * len(p) for p in chunk) + sum(len(c.token_ids) for group in out for c in group)
            record.append((seconds, sum(len(c.token_ids) for group in out for c in group), total, after - before))
            if args.caller == "other-thread":
                print(f"  call {i}: {seconds:.3f} s, {threads} threads, {after - before} voluntary switches", file=sys.stderr)

    engine.generate_sync(prompts[:1], SamplingParams(n=1, max_new_tokens=2, seed=0))  # the loading thread's pool
    if args.caller == "other-thread":
        thread = threading.Thread(target=calls)
        thread.start()
        thread.join()
    else:
        calls()
    timed = record[1:]
    return {
        "seconds": statistics.median(s for s, *_ in timed),
        "generated_per_s": statistics.median(g / s for s, g, *_ in timed),
        "flop": statistics.median(2 * weights * t for _, _, t, _ in timed),
        "voluntary": statistics.median(v for *_, v in timed),
    }


def compare(args: argparse.Namespace) -> int:
    trees = [("this tree", None)] + [(f"{Path(src).resolve().parent.name}", src) for src in args.baseline_src]
    runs: dict[str, list[dict]] = {label: [] for label, _ in trees}
    floors = []
    for r in range(args.rounds):
        floors.append(matmul_gflops(args.threads))
        load = os.getloadavg()[0]
        for label, src in trees[r % len(trees):] + trees[: r % len(trees)]:
            env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
            if src:
                env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
            cmd = [sys.executable, __file__, "--worker", "--preset", args.preset, "--threads", str(args.threads),
                   "--calls", str(args.calls), "--caller", args.caller]
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if proc.returncode != 0:
                raise SystemExit(f"{label} failed:\n{proc.stderr[-3000:]}")
            run = json.loads(proc.stdout.strip().splitlines()[-1])
            run["floor"] = run["flop"] / floors[-1] / 1e9 / run["seconds"]
            runs[label].append(run)
            print(f"round {r + 1} (load {load:.1f}, floor {floors[-1]:.0f} GFLOP/s): {label} {run['seconds']:.3f} s per "
                  f"call, {run['generated_per_s']:,.0f} generated tok/s, {run['voluntary']:.0f} voluntary switches per call",
                  flush=True)
    count, n, tokens = SHAPES[args.preset]
    print(f"\n{args.preset}: {count} prompts x {n} samples x <= {tokens} tokens, {args.threads} threads, caller "
          f"{args.caller}, {args.rounds} rounds, median of {args.calls} calls per process; fp32 floor "
          f"{statistics.median(floors):.0f} GFLOP/s (median)")
    print("| tree | s per call | generated tok/s | % fp32 floor | voluntary switches per call |")
    print("|---|---|---|---|---|")
    med = statistics.median
    for label, rows in runs.items():
        print(f"| {label} | {med(r['seconds'] for r in rows):.3f} | {med(r['generated_per_s'] for r in rows):,.0f} | "
              f"{med(r['floor'] for r in rows):.0%} | {med(r['voluntary'] for r in rows):.0f} |")
    first = trees[0][0]
    for label, _ in trees[1:]:
        ratio = med(a["generated_per_s"] / b["generated_per_s"] for a, b in zip(runs[first], runs[label]))
        print(f"{first} / {label}: generated tok/s {ratio:.2f}x (median of per-round ratios)")
    return 0


def draw(args: argparse.Namespace) -> int:
    """One step's draw at the preset's [samples, vocab]: torch.multinomial against inverse CDF."""
    import torch

    from grpo_run.plugins.engines.hf_decode import inverse_cdf

    torch.set_num_threads(args.threads)
    vocab = {"bench-small": 83, "smollm2": 49152}[args.preset]
    count, n, _ = SHAPES[args.preset]
    probs = torch.softmax(torch.randn(count * n, vocab) * 3, dim=-1)
    for name, fn in (("torch.multinomial", lambda: torch.multinomial(probs, 1)), ("inverse CDF", lambda: inverse_cdf(probs))):
        times = []
        for _ in range(15):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        print(f"{args.preset} [{count * n}, {vocab}], {args.threads} thread(s): {name:<18} {statistics.median(times) * 1e3:8.2f} ms per step")
    return 0


def in_run(args: argparse.Namespace) -> int:
    """Sampling calls inside a short bench-small run, per tree (each in its own process)."""
    for label, src in [("this tree", None)] + [(Path(s).resolve().parent.name, s) for s in args.baseline_src]:
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
        if src:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
        proc = subprocess.run([sys.executable, __file__, "--in-run-worker", "--threads", str(args.threads)],
                              capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            raise SystemExit(f"{label} failed:\n{proc.stderr[-3000:]}")
        print(f"{label} (load {os.getloadavg()[0]:.1f}):")
        print(proc.stdout.rstrip("\n"))
    return 0


def in_run_worker(args: argparse.Namespace) -> int:
    import torch

    from grpo_run.core.config import parse_config
    from grpo_run.core.loop.run import train
    from grpo_run.core.plugins.host import build_plugin_host
    from grpo_run.plugins.engines import hf

    lines: list[str] = []
    original = hf.HFEngine.generate_sync

    def timed(self, *a, **k):
        _, before = _voluntary_switches()
        start = time.perf_counter()
        out = original(self, *a, **k)
        seconds = time.perf_counter() - start
        threads, after = _voluntary_switches()
        lines.append(f"  {seconds:.3f} s on {threading.current_thread().name}, {threads} threads, intra-op "
                     f"{torch.get_num_threads()} after the call, inter-op {torch.get_num_interop_threads()}, "
                     f"{after - before} voluntary switches")
        return out

    hf.HFEngine.generate_sync = timed
    host = build_plugin_host()
    _register_bench_model(host)
    data = _config("bench-small", 6, 1)
    data["train"]["num_threads"] = args.threads
    with tempfile.TemporaryDirectory() as tmp:
        train(parse_config(data, host.registry, source="bench_hf_engine"), host, Path(tmp))
    print("\n".join(lines))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=list(SHAPES), default="bench-small")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--calls", type=int, default=7)
    parser.add_argument("--baseline-src", action="append", default=[], help="another tree's src/ (repeatable)")
    parser.add_argument("--caller", choices=["loading", "other-thread"], default="loading")
    parser.add_argument("--draw", action="store_true", help="time one step's draw instead")
    parser.add_argument("--in-run", action="store_true", help="sampling calls inside a bench-small run instead")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--in-run-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return 0
    if args.in_run_worker:
        return in_run_worker(args)
    if args.draw:
        return draw(args)
    if args.in_run:
        return in_run(args)
    return compare(args)


if __name__ == "__main__":
    sys.exit(main())
