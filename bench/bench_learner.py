"""Learner forward+backward throughput: packed (varlen or dense mask) vs padded, on a length mix.

    python bench/bench_learner.py [--mix bench-small|skewed] [--threads 2] [--repeats 5]

``bench-small``: 16 prompts x 8 samples of bench_step's bench-small shape (prompt 8-24, completion 32).
``skewed``     : 16 prompts x 8 samples, prompt 16-48 tokens, completions from a long-tailed
                 (Pareto) mix capped at 512 new tokens -- most short, a few long.
The samples of a group share their prompt, as in a GRPO batch.
Model: bench-small's (Llama h256, 4 layers, 4 heads, char vocab), random init, fp32.

Modes, each the same objective (sum of advantage-weighted completion log-probs, backward):
``varlen``  : grpo-run's learner path (rows flattened, per-sequence attention, completion logits only,
              each group's prompt computed once);
``unshared``: the same with every sample's prompt computed (``algorithm.share_prompts = false``);
``dense``   : packed rows with the 4D block-causal mask (the path before varlen);
``padded``  : one sequence per row, right-padded to the longest, 2D padding mask -- what a
              padding trainer (TRL) does.
Prints real tokens/s per mode (every sequence's tokens, its prompt's included; median of
``--repeats``, modes taking turns, after a warm-up) and the fp32 matmul floor (tokens/s at
6 x params FLOP per token).

``--micro N`` instead times whole learner steps (``Learner.train_step``: forward, loss, backward,
AdamW) on the same sequences in one forward and in micro-batches of at most N tokens
(``learner.max_tokens_per_forward``; default: a quarter of the batch), and prints both and their
ratio. Asserts nothing.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from floor import matmul_gflops  # noqa: E402


def make_model():
    from transformers import LlamaConfig, LlamaForCausalLM

    from grpo_run.plugins.models.char_tokenizer import build_char_tokenizer

    torch.manual_seed(0)
    vocab = len(build_char_tokenizer())
    config = LlamaConfig(vocab_size=vocab, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=1024,
                         attn_implementation="sdpa", pad_token_id=0)
    return LlamaForCausalLM(config).train()


def make_seqs(mix: str, groups: int = 16, group_size: int = 8, seed: int = 0):
    from grpo_run.core.rollout.packing import SequenceToPack

    rng = random.Random(seed)
    seqs = []
    for _ in range(groups):
        prompt = [rng.randrange(3, 60) for _ in range(rng.randint(8, 24) if mix == "bench-small" else rng.randint(16, 48))]
        for _ in range(group_size):
            c = 32 if mix == "bench-small" else min(512, int(12 * rng.paretovariate(1.1)))
            seqs.append(SequenceToPack(prompt, [rng.randrange(3, 60) for _ in range(c)], rng.gauss(0, 1), [0.0] * c,
                                       seq_id=len(seqs)))
    return seqs


def step_packed(model, batch, layout, dense: bool) -> None:
    from grpo_run.core.learner.logprobs import block_causal_mask, completion_logprobs, packed_token_logprobs

    if dense:
        lp = packed_token_logprobs(model, batch, attention_mask=block_causal_mask(batch.seq_ids)) * batch.completion_mask
    else:
        lp = completion_logprobs(model, batch, layout=layout)[0]
    (-(lp * batch.advantages).sum() / batch.completion_mask.sum()).backward()


def step_padded(model, ids, attn, completion, adv) -> None:
    logits = model(input_ids=ids, attention_mask=attn, use_cache=False).logits[:, :-1]
    logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    (-(logp * adv * completion).sum() / completion.sum()).backward()


def padded_inputs(seqs):
    width = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    attn = torch.zeros_like(ids)
    completion = torch.zeros(len(seqs), width - 1)
    adv = torch.zeros(len(seqs), width - 1)
    for i, s in enumerate(seqs):
        row = s.prompt_ids + s.completion_ids
        ids[i, : len(row)] = torch.tensor(row)
        attn[i, : len(row)] = 1
        completion[i, len(s.prompt_ids) - 1 : len(row) - 1] = 1  # logits at t-1 predict token t
        adv[i] = s.advantage
    return ids, attn, completion, adv


def timed_round_robin(fns: dict, repeats: int) -> dict[str, float]:
    """Median seconds of each function, the functions taking turns (a drifting machine speed
    then hits every mode alike); one untimed warm-up call each."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def micro_versus_one_forward(model, seqs, budget: int, repeats: int) -> None:
    """Median s/step of a learner step in one forward and under ``budget`` tokens per forward."""
    from grpo_run.core.config.schema import AlgorithmSection, KLSlot, OptimSection
    from grpo_run.core.learner.learner import Learner
    from grpo_run.core.learner.spec import ComponentSpec, LearnerSpec, ModelSpec
    from grpo_run.plugins.losses.dapo import DapoLoss

    def learner(tokens: int) -> Learner:
        spec = LearnerSpec(
            model=ModelSpec(path="<in memory>"), algorithm=AlgorithmSection(pack_length=512 + 64),
            optim=OptimSection(lr=1e-6), kl=KLSlot(), loss=ComponentSpec(DapoLoss, DapoLoss.Config()),
            kl_estimator=None, temperature=1.0, total_steps=10**6, pad_token_id=0,
            forward_tokens=tokens, logprob_forward_tokens=tokens,
        )
        return Learner(spec, model, None, DapoLoss(DapoLoss.Config()), None)

    learners = {"one forward": learner(0), f"micro {budget}": learner(budget)}
    forwards = {name: l.train_step(seqs)["perf/micro_batches"] for name, l in learners.items()}
    times = timed_round_robin({name: (lambda l=l: l.train_step(seqs)) for name, l in learners.items()}, repeats)
    for name, seconds in times.items():
        print(f"{name:<14} {seconds:7.3f} s/step  ({forwards[name]:.0f} forward(s) per mini-batch)")
    one, micro = times.values()
    print(f"micro / one forward: {micro / one:.3f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mix", choices=["bench-small", "skewed"], default="skewed")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--modes", default="varlen,unshared,dense,padded")
    parser.add_argument("--micro", type=int, nargs="?", const=-1, default=None, metavar="N",
                        help="time learner steps in one forward vs micro-batches of N tokens (default: a quarter)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.micro is not None:
        seqs = make_seqs(args.mix)
        budget = args.micro if args.micro > 0 else sum(len(s) for s in seqs) // 4
        print(f"mix {args.mix}: {len(seqs)} sequences, {sum(len(s) for s in seqs)} tokens; threads {args.threads}")
        micro_versus_one_forward(make_model(), seqs, budget, args.repeats)
        return 0

    from grpo_run.core.learner.logprobs import batch_layout
    from grpo_run.core.rollout.packing import pack_sequences

    model = make_model()
    seqs = make_seqs(args.mix)
    batch = pack_sequences(seqs, max(512 + 64, max(len(s) for s in seqs)), pad_token_id=0)
    layout = batch_layout(batch)
    unshared = batch_layout(batch, share_prompts=False)
    real = batch.num_real_tokens
    lengths = sorted(len(s) for s in seqs)
    print(f"mix {args.mix}: {len(seqs)} sequences, {real} tokens, lengths min {lengths[0]} "
          f"median {lengths[len(lengths) // 2]} max {lengths[-1]}; packed {batch.num_rows} rows x "
          f"{batch.row_length} (efficiency {batch.packed_ratio:.3f}); padded {len(seqs)} x {lengths[-1]} "
          f"(efficiency {real / (len(seqs) * lengths[-1]):.3f}); shared prompts leave {layout.num_tokens} "
          f"tokens to compute")
    params = sum(p.numel() for p in model.parameters())
    floor = matmul_gflops(args.threads) * 1e9 / (6 * params)
    print(f"threads {args.threads}; fp32 floor {floor:,.0f} tokens/s (6 x {params / 1e6:.2f}M FLOP per token)")
    runs = {
        "varlen": lambda: step_packed(model, batch, layout, dense=False),
        "unshared": lambda: step_packed(model, batch, unshared, dense=False),
        "dense": lambda: step_packed(model, batch, layout, dense=True),
        "padded": lambda: step_padded(model, *padded_inputs(seqs)),
    }
    chosen = {mode: (lambda run=runs[mode]: (run(), model.zero_grad(set_to_none=True))) for mode in args.modes.split(",")}
    for mode, seconds in timed_round_robin(chosen, args.repeats).items():
        computed = layout.num_tokens if mode == "varlen" else real
        print(f"{mode:<8} {seconds:7.3f} s  {real / seconds:9,.0f} tokens/s  {real / seconds / floor:6.1%} of floor"
              + (f"  ({computed / seconds / floor:.1%} counting only the tokens computed)" if computed != real else ""))
    floor_after = matmul_gflops(args.threads) * 1e9 / (6 * params)
    print(f"fp32 floor measured again after the runs: {floor_after:,.0f} tokens/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
