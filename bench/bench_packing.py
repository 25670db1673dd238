"""Packing benchmark: efficiency on a skewed length mix and time to pack / to mask.

Run: ``python bench/bench_packing.py``. Prints numbers; asserts nothing (targets: DESIGN.md).
"""

from __future__ import annotations

import random
import time

import torch

from grpo_run.core.learner.logprobs import block_causal_mask
from grpo_run.core.rollout.packing import SequenceToPack, pack_sequences

torch.set_num_threads(2)


def skewed_mix(n_short: int, n_long: int, seed: int = 0) -> list[SequenceToPack]:
    """Many short sequences (20-60 tokens) and a few long ones (300-700)."""
    rng = random.Random(seed)
    lengths = [rng.randint(20, 60) for _ in range(n_short)] + [rng.randint(300, 700) for _ in range(n_long)]
    rng.shuffle(lengths)
    return [
        SequenceToPack(list(range(8)), list(range(n - 8)), 1.0, [-0.5] * (n - 8), seq_id=i)
        for i, n in enumerate(lengths)
    ]


def bench(name: str, seqs: list[SequenceToPack], pack_length: int, repeats: int = 5) -> None:
    t0 = time.perf_counter()
    for _ in range(repeats):
        batch = pack_sequences(seqs, pack_length, pad_token_id=0)
    pack_ms = (time.perf_counter() - t0) / repeats * 1e3
    t0 = time.perf_counter()
    block_causal_mask(batch.seq_ids)
    mask_ms = (time.perf_counter() - t0) * 1e3
    print(
        f"{name:<28} seqs={len(seqs):4d} tokens={batch.num_real_tokens:6d} rows={batch.num_rows:3d} "
        f"L={batch.row_length:5d} efficiency={batch.packed_ratio:.4f} (target >= 0.95) "
        f"pack={pack_ms:.1f} ms mask={mask_ms:.1f} ms"
    )


if __name__ == "__main__":
    bench("skewed 120 short + 10 long", skewed_mix(120, 10), 1024)
    bench("skewed 480 short + 40 long", skewed_mix(480, 40, seed=1), 2048)
    rng = random.Random(2)
    small = [SequenceToPack(list(range(20)), list(range(rng.randint(1, 32))), 1.0, [], seq_id=i) for i in range(128)]
    small = [SequenceToPack(s.prompt_ids, s.completion_ids, 1.0, [-0.5] * len(s.completion_ids), s.seq_id) for s in small]
    bench("bench-small 16x8, <=32 new", small, 512)
