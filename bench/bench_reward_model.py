"""Reward-model scoring throughput: completions/s of the ``reward_model`` verifier through the scorer.

Builds a randomly initialised one-label Llama classifier (nothing is downloaded) of one of two
shapes -- ``tiny`` (the shipped tiny-arithmetic model's: h128, 4 layers, 2.4M parameters) or
``smollm2`` (SmolLM2-135M's: h576, 30 layers, 135M parameters) -- with the character tokenizer,
and scores ``--completions`` completions per call through :class:`RewardScorer`, the verifier in
a scoring worker of its own as in a run (``scoring.num_workers = 1``). Each text is a prompt and a
completion of about ``--tokens`` characters (= tokens, one per character). Loading the model and a
first warm-up call are not timed. Prints completions/s and the forward's GFLOP/s (2 x parameters x
tokens).

    python bench/bench_reward_model.py --shape tiny --completions 512 --batch-size 64
    python bench/bench_reward_model.py --shape smollm2 --completions 64 --batch-size 16
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import random
import tempfile
import time
from pathlib import Path

import structlog

SHAPES = {
    "tiny": {"hidden_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 4,
             "intermediate_size": 512},
    "smollm2": {"hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
                "intermediate_size": 1536, "vocab_size": 49152},
}


def build(shape: str, dest: Path) -> int:
    """Save a random one-label classifier of ``shape`` with the character tokenizer; its parameter count."""
    import torch
    from transformers import LlamaConfig, LlamaForSequenceClassification

    from grpo_run.plugins.models.char_tokenizer import build_char_tokenizer

    tokenizer = build_char_tokenizer(model_max_length=4096)
    size = {"vocab_size": len(tokenizer), **SHAPES[shape]}
    config = LlamaConfig(**size, max_position_embeddings=4096, num_labels=1, pad_token_id=tokenizer.pad_token_id,
                         tie_word_embeddings=True)
    config.architectures = ["LlamaForSequenceClassification"]
    torch.manual_seed(0)
    model = LlamaForSequenceClassification(config)
    model.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    return sum(p.numel() for p in model.parameters())


def rows(n: int, tokens: int, rng: random.Random) -> tuple[list[dict], list[str]]:
    prompt_chars = min(40, tokens // 4)
    out_rows, completions = [], []
    for i in range(n):
        a, b = rng.randint(0, 10**6), rng.randint(0, 10**6)
        prompt = f"{a}+{b}"[:prompt_chars].ljust(prompt_chars, "0")
        out_rows.append({"id": f"r{i}", "messages": [{"role": "user", "content": prompt}], "verifier": "reward_model"})
        digits = "".join(rng.choice("0123456789+= ") for _ in range(tokens - prompt_chars - 3))
        completions.append(digits)
    return out_rows, completions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    parser.add_argument("--completions", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=256, help="tokens per scored text (prompt + completion)")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))

    from grpo_run.core.scoring.scorer import RewardScorer
    from grpo_run.plugins.verifiers.reward_model import RewardModelConfig, RewardModelVerifier

    with tempfile.TemporaryDirectory() as tmp:
        parameters = build(args.shape, Path(tmp) / "rm")
        config = RewardModelConfig(model=str(Path(tmp) / "rm"), batch_size=args.batch_size, max_length=args.tokens + 16,
                                   dtype=args.dtype, device="cpu")
        batch_rows, completions = rows(args.completions, args.tokens, random.Random(0))
        with RewardScorer({"reward_model": (RewardModelVerifier, config)}, num_workers=1, timeout_s=600) as scorer:
            scorer.start()  # loads the model in its worker: not timed
            asyncio.run(scorer.score(batch_rows[: args.batch_size], completions[: args.batch_size]))  # warm-up
            times = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                scored = asyncio.run(scorer.score(batch_rows, completions))
                times.append(time.perf_counter() - start)
            errors = sum(s.error is not None for s in scored)
    best = min(times)
    forwards = math.ceil(args.completions / args.batch_size)
    gflops = 2 * parameters * args.tokens * args.completions / best / 1e9
    print(f"reward_model {args.shape} ({parameters / 1e6:.1f}M parameters, {args.dtype}), {args.tokens} tokens per "
          f"text, batch_size {args.batch_size}: {args.completions / best:.1f} completions/s "
          f"({args.completions} in {best:.2f} s, {forwards} forwards, {gflops:.0f} GFLOP/s, {errors} errors; "
          f"best of {args.repeats})")


if __name__ == "__main__":
    main()
