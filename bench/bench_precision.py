"""fp32 vs bf16 autocast on this CPU: matmul rate and a learner step (forward + backward).

    python bench/bench_precision.py [--threads 2] [--repeats 5] [--mix bench-small|skewed]

The learner step is bench_learner.py's ``varlen`` path (grpo-run's packed learner forward with
per-sequence attention, completion log-probs, backward) on bench-small's model, once in fp32 and
once under ``torch.autocast("cpu", dtype=torch.bfloat16)`` -- what ``model.autocast =
"bfloat16"`` does. Prints the CPU's bf16 flags (what grpo-run's start-up warning reads, see
``grpo_run.core.learner.cpu_bf16``), both matmul rates, both step times and their ratio. Asserts
nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_learner import make_model, make_seqs, step_packed, timed_round_robin  # noqa: E402
from floor import matmul_gflops  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--mix", choices=["bench-small", "skewed"], default="bench-small")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from grpo_run.core.learner.cpu_bf16 import FAST_BF16_FLAGS, cpu_flags, slow_bf16_warning
    from grpo_run.core.learner.logprobs import batch_layout
    from grpo_run.core.rollout.packing import pack_sequences

    flags = cpu_flags()
    present = sorted(set(FAST_BF16_FLAGS) & flags) if flags is not None else []
    print(f"threads {args.threads}; bf16 CPU flags: {', '.join(present) or 'none'} "
          f"(start-up warning: {'yes' if slow_bf16_warning('bfloat16', 'cpu', flags) else 'no'})")
    fp32 = matmul_gflops(args.threads, repeats=9)
    bf16 = matmul_gflops(args.threads, repeats=9, dtype=torch.bfloat16)
    print(f"matmul 1024^3: fp32 {fp32:6.1f} GFLOP/s, bf16 {bf16:6.1f} GFLOP/s (bf16/fp32 {bf16 / fp32:.2f})")

    model = make_model()
    seqs = make_seqs(args.mix)
    batch = pack_sequences(seqs, max(512 + 64, max(len(s) for s in seqs)), pad_token_id=0)
    layout = batch_layout(batch)

    def fp32_step() -> None:
        step_packed(model, batch, layout, dense=False)
        model.zero_grad(set_to_none=True)

    def bf16_step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            step_packed(model, batch, layout, dense=False)
        model.zero_grad(set_to_none=True)

    times = timed_round_robin({"fp32": fp32_step, "bf16-autocast": bf16_step}, args.repeats)
    tokens = batch.num_real_tokens
    for mode, seconds in times.items():
        print(f"learner step {mode:<14} {seconds:7.3f} s  {tokens / seconds:9,.0f} tokens/s")
    ratio = times["bf16-autocast"] / times["fp32"]
    print(f"bf16 autocast step / fp32 step: {ratio:.2f} ({'slower' if ratio > 1 else 'faster'} under autocast)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
