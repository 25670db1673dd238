"""Multi-turn tool episodes, grpo-run's ``tools`` environment beside TRL's GRPOTrainer tool loop
(``tools=``): episodes/s, s/step, tool calls, reward and the share of rollout time spent in the
environment. Prints figures; asserts nothing.

    make setup-heavy && make setup-bench
    python bench/bench_tools_vs_trl.py [--threads 2] [--pairs 3] [--steps 3] [--warmup 1] [--shape P,G,T]

Same model, prompts, batch, sampling and budgets on both sides: examples/smollm2-calculator-tool.toml
(SmolLM2-135M-Instruct, reasoning-gym multiplications, the ``calculator`` tool and the example's
two worked examples before every question, so that episodes do call the tool: about one in four
at the start, nearly all after three steps), 8 prompts x 8 samples by default, temperature 1, at
most 2 assistant turns (TRL: ``max_tool_calling_iterations = 1``), 96 tokens per episode, reward =
the math verifier on the last assistant turn, DAPO loss, beta 0, one update per batch, fp32,
gradient checkpointing, transformers generation for both. TRL gets a function with the
calculator's JSON schema that calls grpo-run's calculator.

TRL parses tool calls only for chat templates it knows, so both sides run a copy of the model
directory (weights linked, not copied) whose chat template is the ChatML + Hermes ``<tool_call>``
template TRL ships for Qwen2.5 (read from the installed TRL), instead of the example's
``chatml-tools``: same vocabulary and call format, tool schemas in the system message.

Episodes/s = prompts x samples / s per step. Environment share: the time in environment code
(grpo-run: ``reset``/``step`` of each episode; TRL: the tool calls) over the rollout time (grpo-run:
each episode's environment + generation time; TRL: ``_generate_and_score_completions``).
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
from bench_vs_trl import SMOLLM2, _host_and_model  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "smollm2-calculator-tool.toml"
MAX_TURNS, EPISODE_TOKENS = 2, 96


def tool_model_dir() -> str:
    """The SmolLM2 directory with TRL's Qwen2.5 tool template (cached beside the model)."""
    import trl

    _, source = _host_and_model("smollm2")
    template = Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja"
    target = Path(source).parent / f"{Path(source).name}-bench-tools"
    if not target.is_dir():
        tmp = Path(tempfile.mkdtemp(dir=target.parent))
        for item in Path(source).iterdir():
            if item.name != "chat_template.jinja":
                (tmp / item.name).symlink_to(item)
        (tmp / "chat_template.jinja").write_text(template.read_text())
        try:
            tmp.rename(target)
        except OSError:  # another process made it first
            pass
    return str(target)


def _data(steps: int, model_dir: str, shape: str = "") -> dict:
    """The example's config for timing: no eval, no checkpoints, every group trained; ``shape``:
    "PROMPTS,SAMPLES,EPISODE_TOKENS" (empty: 8,8,96)."""
    import tomllib

    data = tomllib.loads(EXAMPLE.read_text())
    data["model"]["name_or_path"] = model_dir
    data["renderer"].pop("chat_template")  # the model directory's (TRL's Qwen2.5) template
    prompts, samples, tokens = (int(x) for x in (shape or f"8,8,{EPISODE_TOKENS}").split(","))
    data["rollout"].update(num_unique_prompts_rollout=prompts, num_samples_per_prompt_rollout=samples,
                           response_length=tokens)
    data["environment"]["max_tokens_per_turn"] = min(data["environment"]["max_tokens_per_turn"], tokens)
    data["train"] = {"total_steps": steps, "local_eval_every": 0}
    data["task"]["eval_size"] = 0
    data["optim"]["warmup_steps"] = 0
    data["checkpoint"] = {"save_final": False}
    data["logging"] = {"progress": False}
    data["algorithm"]["filter_zero_std_samples"] = False
    return data


def run_grpo(threads: int, steps: int, warmup: int, shape: str = "") -> dict:
    from grpo_run.core.config import parse_config
    from grpo_run.core.loop.run import train
    from grpo_run.core.plugins.host import build_plugin_host

    host = build_plugin_host()
    data = _data(steps, tool_model_dir(), shape)
    data["train"]["num_threads"] = threads
    cfg = parse_config(data, host.registry, source="bench_tools_vs_trl")
    with tempfile.TemporaryDirectory() as tmp:
        train(cfg, host, Path(tmp))
        rows = [json.loads(line) for line in (Path(tmp) / "metrics.jsonl").read_text().splitlines()]
    # training rows only (eval rows share the step number); env/* is absent from a step whose every
    # episode failed, so those count as no environment time rather than crashing the bench
    timed = [r for r in rows if r["step"] > warmup and "perf/step_s" in r]
    return {
        "step_s": [r["perf/step_s"] for r in timed],
        "generation_s": [r["perf/generation_s"] for r in timed],
        "env_share": [r.get("env/env_s", 0.0) / max(1e-9, r.get("env/env_s", 0.0) + r.get("env/generation_s", 0.0))
                      for r in timed],
        "turns": [r.get("env/turns_mean", 0.0) for r in timed],
        "tool_calls": [r.get("env/tool_calls_mean", 0.0) for r in timed],
        "reward": [r["reward/mean"] for r in timed],
    }


def run_trl(threads: int, steps: int, warmup: int, shape: str = "") -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import add_response_schema

    from grpo_run import ToolError
    from grpo_run.plugins.environments.tools import ToolsEnvConfig, ToolsEnvironment
    from grpo_run.plugins.tasks.reasoning_gym import ReasoningGymConfig, ReasoningGymTask
    from grpo_run.plugins.tools.calculator import CalculatorConfig, CalculatorTool
    from grpo_run.plugins.verifiers.math import MathVerifier

    torch.set_num_threads(threads)
    path = tool_model_dir()
    data = _data(steps, path, shape)
    prompts, samples = data["rollout"]["num_unique_prompts_rollout"], data["rollout"]["num_samples_per_prompt_rollout"]
    tokenizer = add_response_schema(AutoTokenizer.from_pretrained(path))
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    rows = ReasoningGymTask(ReasoningGymConfig(**{k: v for k, v in data["task"].items() if k != "name"})).train_rows()
    verifier, tool = MathVerifier(), CalculatorTool(CalculatorConfig())
    # the prompt grpo-run's environment opens with: the system message, the worked examples, the question
    env = ToolsEnvironment(ToolsEnvConfig(demonstrations=data["environment"]["demonstrations"]), {"calculator": tool})
    dataset = Dataset.from_list([{"prompt": env.reset(r, 0).messages, "ground_truth": r["ground_truth"]} for r in rows])
    record: dict[str, list[float]] = {"step_s": [], "generation_s": [], "tool_s": [], "calls": [], "reward": []}
    tool_clock = [0.0, 0]

    def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression (+ - * / // % ** and parentheses) exactly.

        Args:
            expression: e.g. 12*(3+4)
        """
        start = time.perf_counter()
        try:
            return tool({"expression": expression})
        except ToolError as exc:
            return f"error: {exc}"
        finally:
            tool_clock[0] += time.perf_counter() - start
            tool_clock[1] += 1

    def math_reward(completions, ground_truth, **_):
        return [verifier.score(c[-1]["content"] or "", gt, {}).score for c, gt in zip(completions, ground_truth)]

    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(), use_cpu=True, bf16=False, fp16=False, seed=1, report_to=[],
        save_strategy="no", logging_steps=1, disable_tqdm=True, max_steps=steps,
        per_device_train_batch_size=prompts * samples, gradient_accumulation_steps=1, steps_per_generation=1,
        num_generations=samples, num_iterations=1, max_completion_length=data["rollout"]["response_length"],
        max_tool_calling_iterations=MAX_TURNS - 1,
        temperature=1.0, top_p=1.0, top_k=0, beta=0.0, loss_type="dapo", epsilon=0.2, epsilon_high=0.28,
        learning_rate=data["optim"]["lr"], lr_scheduler_type="constant", warmup_steps=0, max_grad_norm=1.0,
        dataloader_num_workers=0, gradient_checkpointing=data["model"]["gradient_checkpointing"],
    )
    trainer = GRPOTrainer(model=model, reward_funcs=math_reward, args=args, train_dataset=dataset,
                          processing_class=tokenizer, tools=[calculator])
    produce = trainer._generate_and_score_completions

    def timed_produce(inputs):
        tool_clock[:] = [0.0, 0]
        start = time.perf_counter()
        out = produce(inputs)
        record["generation_s"].append(time.perf_counter() - start)
        record["tool_s"].append(tool_clock[0])
        record["calls"].append(tool_clock[1] / (prompts * samples))
        return out

    trainer._generate_and_score_completions = timed_produce

    class StepClock(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.start = time.perf_counter()

        def on_step_end(self, *a, **k):
            record["step_s"].append(time.perf_counter() - self.start)

        def on_log(self, args, state, control, logs=None, **k):
            if logs and "reward" in logs:
                record["reward"].append(float(logs["reward"]))

    trainer.add_callback(StepClock())
    trainer.train()
    out = {k: v[warmup:] for k, v in record.items()}
    return {"step_s": out["step_s"], "generation_s": out["generation_s"], "tool_calls": out["calls"],
            "env_share": [t / g for t, g in zip(out["tool_s"], out["generation_s"])], "reward": out["reward"]}


def _one_run(which: str, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--worker", which, "--threads", str(args.threads),
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--shape", args.shape]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), TRL_EXPERIMENTAL_SILENCE="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{which} run failed:\n{proc.stderr[-4000:]}")
    return {k: statistics.median(v) for k, v in json.loads(proc.stdout.strip().splitlines()[-1]).items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--shape", default="", help="PROMPTS,SAMPLES,EPISODE_TOKENS instead of 8,8,96")
    parser.add_argument("--worker", choices=["grpo", "trl"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        run = (run_grpo if args.worker == "grpo" else run_trl)(args.threads, args.steps, args.warmup, args.shape)
        print(json.dumps(run))
        return 0
    tool_model_dir()  # made once, before the timed runs
    rollout = _data(1, "", args.shape)["rollout"]
    episodes = rollout["num_unique_prompts_rollout"] * rollout["num_samples_per_prompt_rollout"]
    rounds = []
    for i in range(args.pairs):
        load = os.getloadavg()[0]
        results = {"grpo-run": _one_run("grpo", args), "TRL": _one_run("trl", args)}
        rounds.append((load, results))
        print(f"round {i + 1}: load {load:.1f}; " + "; ".join(
            f"{k} {r['step_s']:.2f} s/step, {episodes / r['step_s']:.2f} episodes/s, tool calls/episode "
            f"{r['tool_calls']:.2f}, reward {r['reward']:.2f}" for k, r in results.items()), flush=True)
    med = statistics.median
    print(f"\n{SMOLLM2} (Qwen2.5 tool template, the example's worked examples), {episodes} episodes per step, <= {MAX_TURNS} turns, "
          f"{rollout['response_length']} tokens per episode, "
          f"{args.threads} threads, {args.pairs} interleaved rounds, {args.steps - args.warmup} timed steps per "
          f"run; load (1 min) at round starts {min(r[0] for r in rounds):.1f}-{max(r[0] for r in rounds):.1f}")
    print("| run | s/step | rollout s | episodes/s | tool calls / episode | reward | environment share of rollout |")
    print("|---|---|---|---|---|---|---|")
    for label in ("grpo-run", "TRL"):
        rows = [r[1][label] for r in rounds]
        print(f"| {label} | {med(r['step_s'] for r in rows):.2f} | {med(r['generation_s'] for r in rows):.2f} | "
              f"{med(episodes / r['step_s'] for r in rows):.2f} | {med(r['tool_calls'] for r in rows):.2f} | "
              f"{med(r['reward'] for r in rows):.2f} | "
              f"{med(r['env_share'] for r in rows):.2%} |")
    speedup = med(r[1]["TRL"]["step_s"] / r[1]["grpo-run"]["step_s"] for r in rounds)
    print(f"grpo-run / TRL episodes per second (median of per-round ratios): {speedup:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
