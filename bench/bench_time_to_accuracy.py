"""Time to a given greedy eval accuracy on examples/smollm2-arithmetic.toml, grpo-run vs TRL's
GRPOTrainer, same seeds. Prints a table; asserts nothing.

    make setup-heavy && make setup-bench
    python bench/bench_time_to_accuracy.py [--target 0.5] [--seeds 1,2,3] [--max-steps 60]
                                           [--eval-every 10] [--threads 2] [--eval-size 64] [--shape P,G,T]

Both train SmolLM2-135M-Instruct with the example's settings (8 prompts x 8 samples, 48 new tokens,
temperature 1, DAPO, its lr and warm-up, beta 0, fp32, transformers generation) from the same seed,
and every ``--eval-every`` steps score greedy completions of the same held-out prompts (the task's
eval rows, through the chat template, at most 48 new tokens) with the math verifier; a run stops
at the first eval at or above ``--target``. Training time excludes the evaluations: grpo-run's
``perf/elapsed_s`` at the eval step less the earlier ``perf/eval_s``; TRL's summed step times.
grpo-run runs in its default form (``filter_zero_std_samples`` on, as in the example); TRL has no
such filter. Runs take turns (grpo-run seed 1, TRL seed 1, grpo-run seed 2, ...). A full table (3
seeds x 2 frameworks, up to 60 steps each) takes hours on 2 cores; ``--seeds 1 --max-steps 2
--eval-every 1 --eval-size 8 --shape 2,4,24`` proves the script in a few minutes.
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
from bench_vs_trl import _host_and_model, bench_config  # noqa: E402


def _data(seed: int, max_steps: int, eval_every: int, eval_size: int, target: float, threads: int,
          shape: str = "") -> dict:
    data = bench_config("smollm2", max_steps, shape=shape)
    data["run"]["seed"] = seed
    data["algorithm"]["filter_zero_std_samples"] = True
    data["task"]["eval_size"] = eval_size
    data["train"].update(local_eval_every=eval_every, stop_at_eval_accuracy=target, num_threads=threads)
    data["optim"]["warmup_steps"] = 2
    return data


def run_grpo(args: argparse.Namespace, seed: int) -> list[tuple[int, float, float]]:
    """(step, training seconds, eval accuracy) at each eval."""
    from grpo_run.core.config import parse_config
    from grpo_run.core.loop.run import train
    from grpo_run.core.plugins.host import build_plugin_host

    host = build_plugin_host()
    data = _data(seed, args.max_steps, args.eval_every, args.eval_size, args.target, args.threads, args.shape)
    cfg = parse_config(data, host.registry, source="bench_time_to_accuracy")
    with tempfile.TemporaryDirectory() as tmp:
        train(cfg, host, Path(tmp))
        rows = [json.loads(line) for line in (Path(tmp) / "metrics.jsonl").read_text().splitlines()]
    points, eval_s = [], 0.0
    for row in rows:
        if "eval/accuracy" in row:
            points.append((row["step"], row.get("perf/elapsed_s", 0.0) - eval_s, row["eval/accuracy"]))
        eval_s += row.get("perf/eval_s", 0.0)
    return points


def run_trl(args: argparse.Namespace, seed: int) -> list[tuple[int, float, float]]:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from grpo_run.plugins.tasks.reasoning_gym import ReasoningGymConfig, ReasoningGymTask
    from grpo_run.plugins.verifiers.math import MathVerifier

    torch.set_num_threads(args.threads)
    _, path = _host_and_model("smollm2")
    data = _data(seed, args.max_steps, args.eval_every, args.eval_size, args.target, args.threads, args.shape)
    rollout = data["rollout"]
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    task = ReasoningGymTask(ReasoningGymConfig(**{k: v for k, v in data["task"].items() if k != "name"}))
    verifier = MathVerifier()
    to_rows = lambda rows: [{"prompt": r["messages"], "ground_truth": r["ground_truth"]} for r in rows]  # noqa: E731
    eval_rows = to_rows(task.eval_rows())

    def math_reward(completions, ground_truth, **_):
        return [verifier.score(c[-1]["content"], gt, {}).score for c, gt in zip(completions, ground_truth)]

    def greedy_accuracy() -> float:
        left = AutoTokenizer.from_pretrained(path, padding_side="left")
        texts = [left.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False) for r in eval_rows]
        batch = left(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        model.eval()
        with torch.no_grad():
            out = model.generate(**batch, do_sample=False, max_new_tokens=rollout["response_length"],
                                 pad_token_id=left.pad_token_id)
        model.train()
        answers = left.batch_decode(out[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
        return statistics.fmean(verifier.score(a, r["ground_truth"], {}).score >= 1.0
                                for a, r in zip(answers, eval_rows))

    cfg = GRPOConfig(
        output_dir=tempfile.mkdtemp(), use_cpu=True, bf16=False, fp16=False, seed=seed, report_to=[],
        save_strategy="no", logging_steps=1, disable_tqdm=True, max_steps=args.max_steps,
        per_device_train_batch_size=rollout["num_unique_prompts_rollout"] * rollout["num_samples_per_prompt_rollout"],
        gradient_accumulation_steps=1, steps_per_generation=1, num_generations=rollout["num_samples_per_prompt_rollout"],
        num_iterations=1, max_completion_length=rollout["response_length"], temperature=1.0, top_p=1.0, top_k=0,
        beta=0.0, loss_type="dapo", epsilon=0.2, epsilon_high=0.28, learning_rate=data["optim"]["lr"],
        lr_scheduler_type="constant_with_warmup", warmup_steps=data["optim"]["warmup_steps"],
        max_grad_norm=data["optim"]["max_grad_norm"], dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=math_reward, args=cfg, train_dataset=Dataset.from_list(
        to_rows(task.train_rows())), processing_class=tokenizer)
    points = [(0, 0.0, greedy_accuracy())]
    clock = {"train_s": 0.0}

    class EvalEvery(TrainerCallback):
        def on_step_begin(self, _args, state, control, **_):
            self.start = time.perf_counter()

        def on_step_end(self, _args, state, control, **_):
            clock["train_s"] += time.perf_counter() - self.start
            if state.global_step % args.eval_every == 0:
                points.append((state.global_step, clock["train_s"], greedy_accuracy()))
                control.should_training_stop = points[-1][2] >= args.target

    trainer.add_callback(EvalEvery())
    if points[0][2] < args.target:
        trainer.train()
    return points


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", type=float, default=0.5)
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--max-steps", type=int, default=60)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--eval-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--shape", default="", help="PROMPTS,SAMPLES,NEW_TOKENS instead of the example's 8,8,48")
    parser.add_argument("--worker", choices=["grpo", "trl"], help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps((run_grpo if args.worker == "grpo" else run_trl)(args, args.seed)))
        return 0
    table = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        for label, worker in (("grpo-run", "grpo"), ("TRL", "trl")):
            load = os.getloadavg()[0]
            cmd = [sys.executable, __file__, "--worker", worker, "--seed", str(seed), "--target", str(args.target),
                   "--max-steps", str(args.max_steps), "--eval-every", str(args.eval_every),
                   "--eval-size", str(args.eval_size), "--threads", str(args.threads), "--shape", args.shape]
            proc = subprocess.run(cmd, capture_output=True, text=True,
                                  env=dict(os.environ, OMP_NUM_THREADS=str(args.threads)))
            if proc.returncode != 0:
                raise SystemExit(f"{label} seed {seed} failed:\n{proc.stderr[-4000:]}")
            points = json.loads(proc.stdout.strip().splitlines()[-1])
            reached = next((p for p in points if p[2] >= args.target), None)
            table.append((label, seed, load, points, reached))
            curve = ", ".join(f"step {s}: {a:.2f} @ {t:.0f} s" for s, t, a in points)
            print(f"{label} seed {seed} (load {load:.1f}): {curve}", flush=True)
    print(f"\ntarget greedy eval accuracy {args.target} on {args.eval_size} held-out prompts, "
          f"eval every {args.eval_every} steps, at most {args.max_steps} steps, {args.threads} threads")
    print("| run | seed | start accuracy | best accuracy | steps to target | training s to target |")
    print("|---|---|---|---|---|---|")
    for label, seed, _, points, reached in table:
        print(f"| {label} | {seed} | {points[0][2]:.2f} | {max(p[2] for p in points):.2f} | "
              f"{reached[0] if reached else '-'} | {f'{reached[1]:.0f}' if reached else 'not reached'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
