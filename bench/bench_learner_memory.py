"""Peak memory of one learner step as the batch grows, with and without the token budget.

    python bench/bench_learner_memory.py [--scales 1,2,3,4] [--budget 16384]
    python bench/bench_learner_memory.py --worker --sequences N --budget B   # one step, prints JSON

Each figure is one learner step in a fresh process (its RSS high-water mark, ``VmHWM``, so
nothing of an earlier step counts), on a Llama-shaped model with deep, narrow layers (h64, 8
layers, 1k vocabulary, random init, fp32, no checkpointing) whose activations, not its weights or
the libraries, dominate the peak. Scale 1 is 128 sequences of 120 tokens (15,360 tokens, under
the default budget). With a budget the step runs in micro-batches of at most that many tokens, so
its peak stays put as the batch grows; with ``--budget 0`` the whole mini-batch is one forward.
Prints peak RSS and its ratio to scale 1 per budget. Asserts nothing
(``tests/core/learner/test_memory.py`` holds the bound).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
from pathlib import Path

SEQUENCE_TOKENS = (20, 100)
"""Prompt and completion tokens of every sequence."""
SCALE_1 = 128
"""Sequences at scale 1."""


def one_step(sequences: int, budget: int) -> dict[str, float]:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from grpo_run.core.config.schema import AlgorithmSection, KLSlot, OptimSection
    from grpo_run.core.learner.learner import Learner
    from grpo_run.core.learner.spec import ComponentSpec, LearnerSpec, ModelSpec
    from grpo_run.core.memory.budget import resident_peak_bytes
    from grpo_run.core.rollout.packing import SequenceToPack
    from grpo_run.plugins.losses.dapo import DapoLoss

    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=1024, hidden_size=64, intermediate_size=256, num_hidden_layers=8,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256, pad_token_id=0)
    model = LlamaForCausalLM(config).float().train()
    rng = random.Random(0)
    prompt_len, completion_len = SEQUENCE_TOKENS
    seqs = [
        SequenceToPack([rng.randrange(1, 1024) for _ in range(prompt_len)],
                       [rng.randrange(1, 1024) for _ in range(completion_len)],
                       rng.gauss(0.0, 1.0), [-1.0] * completion_len, seq_id=i)
        for i in range(sequences)
    ]
    spec = LearnerSpec(
        model=ModelSpec(path="<in memory>"),
        algorithm=AlgorithmSection(pack_length=2048, share_prompts=False),
        optim=OptimSection(lr=1e-4), kl=KLSlot(), loss=ComponentSpec(DapoLoss, DapoLoss.Config()),
        kl_estimator=None, temperature=1.0, total_steps=1, pad_token_id=0,
        forward_tokens=budget, logprob_forward_tokens=2 * budget,
    )
    learner = Learner(spec, model, None, DapoLoss(DapoLoss.Config()), None)
    metrics = learner.train_step(seqs)
    return {
        "sequences": sequences,
        "tokens": sequences * (prompt_len + completion_len),
        "budget": budget,
        "micro_batches": metrics["perf/micro_batches"],
        "peak_rss_mb": resident_peak_bytes() / 2**20,
        "learner_s": metrics["perf/learner_s"],
    }


def measure(sequences: int, budget: int) -> dict[str, float]:
    """:func:`one_step` in a fresh interpreter."""
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--worker", "--sequences", str(sequences), "--budget", str(budget)],
        check=True, capture_output=True, text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help="run one step here and print its figures")
    parser.add_argument("--sequences", type=int, default=SCALE_1)
    parser.add_argument("--budget", type=int, default=16384)
    parser.add_argument("--scales", default="1,2,3,4")
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(one_step(args.sequences, args.budget)))
        return
    scales = [int(s) for s in args.scales.split(",")]
    print(f"{'budget':>8} {'scale':>5} {'tokens':>7} {'micro':>5} {'peak MiB':>9} {'x scale 1':>9} {'step s':>7}")
    for budget in (args.budget, 0):
        first = None
        for scale in scales:
            r = measure(SCALE_1 * scale, budget)
            first = first or r["peak_rss_mb"]
            print(f"{budget or 'off':>8} {scale:>5} {r['tokens']:>7} {r['micro_batches']:>5.0f} "
                  f"{r['peak_rss_mb']:>9.0f} {r['peak_rss_mb'] / first:>9.2f} {r['learner_s']:>7.2f}")


if __name__ == "__main__":
    main()
