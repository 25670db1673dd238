"""Speed of one training step on the embedded task; prints figures, asserts nothing.

    python bench/bench_step.py [--preset embedded|bench-small] [--steps N] [--async-steps K]
                               [--autocast bfloat16] [--lora-rank R] [--threads T] [--engine-threads E]

``embedded``   : the shipped tiny-arithmetic model and examples/arithmetic.toml settings.
``bench-small``: DESIGN.md's reference point -- Llama-style h256, 4 layers, 4 heads, char vocab,
                 16 prompts x 8 samples, <= 32 new tokens (random init, so completions run long).
Prints seconds per step, generated tokens/s, learner tokens/s and packing efficiency (median over
the steps after a warm-up step), plus the packing efficiency of a skewed synthetic length mix.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _config(preset: str, steps: int, async_steps: int, autocast: str = "none", lora_rank: int = 0) -> dict:
    data = tomllib.loads((ROOT / "examples" / "arithmetic.toml").read_text())
    data["train"] = {"total_steps": steps, "local_eval_every": 0}
    data["optim"]["warmup_steps"] = 0
    data["checkpoint"] = {"save_final": False}
    data["logging"] = {"progress": False}
    data["rollout"]["async_steps"] = async_steps
    data["algorithm"]["filter_zero_std_samples"] = False  # time every sequence, signal or not
    data["model"]["autocast"] = autocast  # bf16 matmuls over fp32 master weights
    if lora_rank:
        data["model"]["lora"] = {"r": lora_rank, "alpha": 2.0 * lora_rank}
    if preset == "bench-small":
        data["model"]["name_or_path"] = "tiny-random-bench"
        data["rollout"]["response_length"] = 32
        data["data"]["max_prompt_token_length"] = 32
    return data


def _skewed_packing_efficiency(pack_length: int = 512) -> float:
    from grpo_run.core.rollout.packing import SequenceToPack, pack_sequences

    rng = random.Random(0)
    seqs = []
    for i in range(256):
        n = rng.choice([rng.randint(8, 40)] * 4 + [rng.randint(100, 400)])  # many short, some long
        seqs.append(SequenceToPack(prompt_ids=[1] * 8, completion_ids=[2] * n, advantage=1.0,
                                   engine_logprobs=[0.0] * n, seq_id=i))
    return pack_sequences(seqs, pack_length, pad_token_id=0).packed_ratio


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=["embedded", "bench-small"], default="embedded")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--async-steps", type=int, default=1)
    parser.add_argument("--autocast", choices=["none", "bfloat16"], default="none")
    parser.add_argument("--lora-rank", type=int, default=0, help="train LoRA adapters of this rank (0: full)")
    parser.add_argument("--threads", type=int, default=0, help="train.num_threads (0: torch's default)")
    parser.add_argument("--engine-threads", type=int, default=0, help="the hf engine's num_threads (0: its default)")
    args = parser.parse_args()

    from grpo_run.core.config import parse_config
    from grpo_run.core.plugins.host import build_plugin_host
    from grpo_run.core.loop.run import train

    host = build_plugin_host()
    if args.preset == "bench-small":
        _register_bench_model(host)
    data = _config(args.preset, args.steps, args.async_steps, args.autocast, args.lora_rank)
    data["train"]["num_threads"] = args.threads
    if args.engine_threads:
        data["engine"] = {"name": "hf", "num_threads": args.engine_threads}
    cfg = parse_config(data, host.registry, source="bench")
    with tempfile.TemporaryDirectory() as tmp:
        train(cfg, host, Path(tmp))
        rows = [json.loads(line) for line in (Path(tmp) / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["step"] >= 2]  # step 1 pays one-off costs
    med = lambda key: statistics.median(r[key] for r in rows if r.get(key) is not None)  # noqa: E731
    print(f"preset {args.preset}, async_steps {args.async_steps}, autocast {args.autocast}, "
          f"lora rank {args.lora_rank or '-'}, threads {args.threads or 'default'}, "
          f"engine threads {args.engine_threads or 'default'}, {len(rows)} timed steps")
    print(f"seconds per step          {med('perf/step_s'):8.3f}")
    print(f"generation seconds/step   {med('perf/generation_s'):8.3f}")
    print(f"learner seconds/step      {med('perf/learner_s'):8.3f}")
    other = statistics.median(r["perf/step_s"] - r["perf/generation_s"] - r["perf/learner_s"] for r in rows)
    print(f"other seconds/step        {other:8.3f}  (packing, weight sync, metrics, waiting)")
    print(f"generated tokens/s        {med('perf/generation_tokens_per_s'):8.0f}")
    print(f"learner tokens/s          {med('perf/learner_tokens_per_s'):8.0f}")
    print(f"packing efficiency (run)  {med('packing/packed_ratio'):8.3f}")
    print(f"packing efficiency (skewed mix, pack_length 512) {_skewed_packing_efficiency():.3f}")
    return 0


def _register_bench_model(host) -> None:
    """bench-small: the tiny-random source with DESIGN.md's sizes, under its own name."""
    base = host.registry.get("model", "tiny-random")

    class BenchModel(base):
        name = "tiny-random-bench"

        def __init__(self, config):
            super().__init__(base.Config(hidden_size=256, num_layers=4, num_heads=4))

    host.registry.add("model", BenchModel, "bench", "0")


if __name__ == "__main__":
    sys.exit(main())
