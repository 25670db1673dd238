"""``grpo-run plan`` at real sizes, the way a user runs it: seconds per plan, the verdict, the
overrides it suggests, the plan with them, and (``--simulate``) one learner rank simulated.

    python bench/bench_plan_layouts.py                 # Qwen2.5-7B / Llama-3.1-8B, Open Instruct's settings, 8 x 80 GB
    python bench/bench_plan_layouts.py --simulate      # and rank 0 of the fitting layout on fake tensors (minutes)
    python bench/bench_plan_layouts.py --repeat 3      # each plan timed 3 times (min / median / max)

The shapes are the published configs (only ``config.json`` is written). The settings are Open
Instruct's GRPO example for 7B models: 32 prompts x 8 samples x (512 + 1024) tokens, KL beta 0.01
against a frozen reference, bf16 autocast, 8 learner ranks sharded with fsdp2 or DeepSpeed ZeRO-3,
the hf engine beside them; and 6 fsdp2 learners + 2 vLLM engines placed by Ray (planned without
vLLM installed). Each plan runs as ``python -m grpo_run plan ... --json`` in a process of its own,
so the seconds include starting Python and importing torch and transformers. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHAPES = {
    "Qwen2.5-7B": ("qwen2", dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                                 num_attention_heads=28, num_key_value_heads=4, tie_word_embeddings=False,
                                 max_position_embeddings=32768)),
    "Llama-3.1-8B": ("llama", dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                   num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=False,
                                   max_position_embeddings=131072)),
}
CONFIG = """
[model]
name_or_path = "{model}"
device = "cuda"
autocast = "bfloat16"

[task]
name = "arithmetic"

[data]
max_prompt_token_length = 512

[rollout]
num_unique_prompts_rollout = 32
num_samples_per_prompt_rollout = 8
response_length = 1024

[algorithm]
pack_length = 16384

[kl]
name = "k3"
beta = 0.01

[learner]
num_learners = 8
strategy = "fsdp2"

[verifiers.math]
weight = 1.0
"""
LAYOUTS = {
    "8 x fsdp2, hf engine": [],
    "8 x ZeRO-3, hf engine": ['learner.strategy="deepspeed"', "learner.zero_stage=3"],
    "6 x fsdp2 + 2 vLLM (Ray)": ["learner.num_learners=6", 'engine.name="vllm"', "engine.num_engines=2",
                                 'engine.python="/nonexistent/python"', 'distributed.backend="ray"',
                                 "distributed.engine_resources.num_gpus=1", "distributed.learner_resources.num_gpus=1",
                                 "rollout.async_steps=2", 'model.dtype="bfloat16"', 'model.autocast="none"'],
}


def plan(config: Path, overrides: list[str], *extra: str) -> tuple[float, dict]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "grpo_run", "plan", str(config), "--device", "cuda", "--memory", "80GiB",
                           "--gpus", "8", "--json", *[a for o in overrides for a in ("--set", o)], *extra],
                          capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if not done.stdout.strip():
        raise SystemExit(f"plan failed: {done.stderr[-2000:]}")
    return seconds, json.loads(done.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulate", action="store_true", help="also simulate rank 0 of the fitting layout")
    parser.add_argument("--repeat", type=int, default=1, help="time each plan this many times")
    args = parser.parse_args()
    from transformers import AutoConfig

    gib = 2**30
    print("| model | layout | seconds (min / median / max) | verdict | suggested | cuda:0 after | simulated rank 0 vs plan |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, (kind, shape) in SHAPES.items():
            model = Path(tmp) / name
            AutoConfig.for_model(kind, **shape).save_pretrained(model)
            config = Path(tmp) / f"{name}.toml"
            config.write_text(CONFIG.format(model=model))
            for layout, overrides in LAYOUTS.items():
                times, result = [], {}
                for _ in range(args.repeat):
                    seconds, result = plan(config, overrides)
                    times.append(seconds)
                suggested = result["suggested"]
                verdict = "fits" if result["fits"] else "does not fit"
                _, fixed = plan(config, overrides + suggested, *(["--simulate"] if args.simulate else []))
                sim = "-"
                if args.simulate and "simulated" in fixed:
                    s = fixed["simulated"]
                    sim = (f"{s['learner_step_peak_bytes'] / gib:.1f} GiB vs {s['planned_learner_step_bytes'] / gib:.1f} "
                           f"({s['difference']:+.0%}, {s['seconds']:.0f} s)")
                peak = fixed["devices"]["cuda:0"]["peak_bytes"] / gib
                timing = f"{min(times):.1f} / {statistics.median(times):.1f} / {max(times):.1f}"
                print(f"| {name} | {layout} | {timing} | {verdict} | {' '.join(suggested) or '-'} | "
                      f"{peak:.1f} GiB ({'fits' if fixed['fits'] else 'does not fit'}) | {sim} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
