"""Varlen attention for packed batches: the layout, the kernel, and the switch of a model to it.

References are independent: each sequence run alone through a fresh model with transformers'
own causal attention (float64 log-softmax), or a dense per-sequence softmax written out here.
"""

from __future__ import annotations

import copy
import sys
import random

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from grpo_run.core.compat import torch_varlen_attention
from grpo_run.core.learner import attention
from grpo_run.core.learner.attention import enable_varlen_attention, varlen_attention, varlen_supported
from grpo_run.core.learner.layout import length_buckets, sequence_layout
from support.entropy import token_entropy
from grpo_run.core.learner.logprobs import (
    batch_layout,
    block_causal_mask,
    completion_logprobs,
    packed_token_logprobs,
)
from grpo_run.core.rollout.packing import SequenceToPack, pack_sequences

torch.set_num_threads(min(2, torch.get_num_threads()))

VOCAB = 40


def llama(attn: str = "sdpa", seed: int = 0, **overrides) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, attn_implementation=attn, **overrides,
    )
    return LlamaForCausalLM(config).train()


def skewed_seqs(seed: int = 0) -> list[SequenceToPack]:
    """Lengths 2..60: several length buckets, some of equal lengths (the reshape path)."""
    rng = random.Random(seed)
    lengths = [(3, 57), (2, 30), (4, 28), (1, 9), (2, 2), (3, 3), (2, 4), (5, 14), (1, 1), (6, 40)]
    return [
        SequenceToPack([rng.randrange(1, VOCAB) for _ in range(p)], [rng.randrange(1, VOCAB) for _ in range(c)],
                       rng.gauss(0, 1), [0.0] * c, seq_id=i)
        for i, (p, c) in enumerate(lengths)
    ]


def grouped_seqs(seed: int = 0) -> list[SequenceToPack]:
    """Three groups whose samples share a prompt, completions 1..40 tokens (so one group's samples
    fall in different length buckets), and one sequence alone with its prompt."""
    rng = random.Random(seed)
    out: list[SequenceToPack] = []
    for prompt_len, completions in [(5, [40, 3, 12, 1]), (2, [6, 6, 30]), (9, [9, 2]), (4, [7])]:
        prompt = [rng.randrange(1, VOCAB) for _ in range(prompt_len)]
        for c in completions:
            out.append(SequenceToPack(prompt, [rng.randrange(1, VOCAB) for _ in range(c)], rng.gauss(0, 1),
                                      [0.0] * c, seq_id=len(out)))
    return out


def unpacked(model: torch.nn.Module, s: SequenceToPack) -> torch.Tensor:
    x = torch.tensor([s.prompt_ids + s.completion_ids])
    logits = model(input_ids=x, use_cache=False).logits[0]
    picked = torch.log_softmax(logits[:-1].double(), -1).gather(-1, x[0, 1:, None]).squeeze(-1)
    return torch.cat([picked.new_zeros(1), picked])


def test_varlen_attention_equals_per_sequence_softmax() -> None:
    gen = torch.Generator().manual_seed(0)
    lengths = [5, 1, 7, 7, 3]
    spans, r = [], 0
    for n in lengths:  # one sequence per row of 8 is enough for the layout
        spans.append((r, 0, n))
        r += 1
    layout = sequence_layout(spans, row_length=8)
    total, heads, dim = sum(lengths), 4, 8
    q, k, v = (torch.randn(1, heads, total, dim, generator=gen, dtype=torch.float64) for _ in range(3))
    k2, v2 = k[:, :2], v[:, :2]  # grouped-query: 2 key/value heads for 4 query heads
    out = varlen_attention(q, k2, v2, layout, scaling=0.3)
    assert out.shape == (1, total, heads, dim)
    cu = layout.cu_seqlens.tolist()
    for a, b in zip(cu, cu[1:]):
        kk = k2[0, :, a:b].repeat_interleave(2, dim=0)
        vv = v2[0, :, a:b].repeat_interleave(2, dim=0)
        scores = q[0, :, a:b] @ kk.transpose(-1, -2) * 0.3
        scores = scores.masked_fill(torch.ones(b - a, b - a, dtype=torch.bool).triu(1), float("-inf"))
        ref = torch.softmax(scores, -1) @ vv  # [H, n, D]
        torch.testing.assert_close(out[0, a:b], ref.transpose(0, 1), rtol=0, atol=1e-12)


def assert_equal_to_unpacked(model, seqs, batch, layout=None, seed: int = 2) -> None:
    """Every token's packed log-prob and the gradient of a random weighting of them equal each
    sequence run alone (float64 reference)."""
    weights = torch.randn(batch.input_ids.shape, generator=torch.Generator().manual_seed(seed))
    packed = packed_token_logprobs(model, batch, layout=layout)
    (packed * weights).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    for i, s in enumerate(seqs):
        r, a, b = batch.spans[i]
        ref = unpacked(model, s)
        torch.testing.assert_close(packed[r, a:b].detach().double(), ref.detach(), rtol=0, atol=1e-5)
        (ref * weights[r, a:b].double()).sum().backward()
    for name, p in model.named_parameters():  # fp32 sums over ~250 tokens in different orders
        torch.testing.assert_close(grads[name], p.grad, rtol=1e-5, atol=5e-6, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_skewed_lengths_equal_unpacked_values_and_gradients(attn: str) -> None:
    seqs = skewed_seqs()
    batch = pack_sequences(seqs, pack_length=72, pad_token_id=0)
    assert len(batch_layout(batch).buckets) >= 3
    assert_equal_to_unpacked(llama(attn), seqs, batch)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_shared_prompts_equal_unpacked_values_and_gradients(attn: str) -> None:
    """Each group's prompt is computed once; every sequence's log-probs (its prompt's too) and the
    gradients still equal each sequence run alone."""
    seqs = grouped_seqs()
    batch = pack_sequences(seqs, pack_length=64, pad_token_id=0)
    layout = batch_layout(batch)
    assert layout.shares and layout.num_virtual_tokens - layout.num_tokens == 5 * 3 + 2 * 2 + 9
    assert_equal_to_unpacked(llama(attn, seed=5), seqs, batch, layout, seed=3)


def test_shared_and_unshared_prompts_train_alike() -> None:
    """The learner's objective (completion log-probs) with and without sharing: same values and
    gradients to float rounding, also under gradient checkpointing."""
    seqs = grouped_seqs(1)
    batch = pack_sequences(seqs, pack_length=64, pad_token_id=0)
    results = []
    for share, checkpointing in [(False, False), (True, False), (True, True)]:
        model = llama(seed=6)
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        lp, _ = completion_logprobs(model, batch, layout=batch_layout(batch, share_prompts=share))
        (lp * batch.advantages).sum().backward()
        results.append((lp.detach(), [p.grad for p in model.parameters()]))
    (base_lp, base_grads), *others = results
    for lp, grads in others:
        torch.testing.assert_close(lp, base_lp, rtol=0, atol=1e-6)
        for a, b in zip(grads, base_grads):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=2e-6)  # sums in another order


def test_completion_logprobs_and_entropy_on_the_mask_only() -> None:
    seqs = skewed_seqs(1)
    batch = pack_sequences(seqs, pack_length=72, pad_token_id=0)
    model = llama(seed=1)
    with torch.no_grad():
        every = packed_token_logprobs(model, batch, temperature=0.7)
        got, entropy = completion_logprobs(model, batch, temperature=0.7, entropy=True)
        logits = model(input_ids=batch.input_ids, position_ids=batch.position_ids, use_cache=False,
                       attention_mask=block_causal_mask(batch.seq_ids)).logits
    m = batch.completion_mask
    torch.testing.assert_close(got[m], every[m], rtol=0, atol=1e-6)
    assert (got[~m] == 0).all() and (entropy[~m] == 0).all()
    torch.testing.assert_close(entropy[m], token_entropy(logits, temperature=0.7)[m], rtol=0, atol=1e-5)


def test_switched_model_behaves_as_before_outside_packed_forwards() -> None:
    """After the switch, an ordinary (padded, cached) call of the model gives what it gave before."""
    for attn in ("sdpa", "eager"):
        model, fresh = llama(attn).eval(), llama(attn).eval()
        assert enable_varlen_attention(model) and enable_varlen_attention(model)  # idempotent
        assert model.config._attn_implementation == f"grpo_varlen:{attn}"
        ids = torch.tensor([[0, 0, 5, 6, 7], [1, 2, 3, 4, 5]])
        mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
        with torch.no_grad():
            got = model(input_ids=ids, attention_mask=mask).logits
            want = fresh(input_ids=ids, attention_mask=mask).logits
            greedy = model.generate(ids, attention_mask=mask, max_new_tokens=4, do_sample=False, pad_token_id=0)
            greedy_fresh = fresh.generate(ids, attention_mask=mask, max_new_tokens=4, do_sample=False, pad_token_id=0)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
        assert torch.equal(greedy, greedy_fresh)


def test_gradient_checkpointing_keeps_sequences_apart() -> None:
    """Checkpointing recomputes attention in backward; the varlen layout must reach it there too."""
    seqs = skewed_seqs(2)
    batch = pack_sequences(seqs, pack_length=72, pad_token_id=0)
    plain = llama(seed=3)
    ckpt = copy.deepcopy(plain)
    ckpt.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    for model in (plain, ckpt):
        (completion_logprobs(model, batch)[0] * batch.advantages).sum().backward()
    for (name, a), b in zip(plain.named_parameters(), ckpt.parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-7, msg=name)


def test_unsupported_models_take_the_dense_path() -> None:
    windowed = llama(sliding_window=8, layer_types=["sliding_attention", "full_attention"])
    assert not varlen_supported(windowed)
    assert not enable_varlen_attention(windowed)
    assert not varlen_supported(torch.nn.Linear(2, 2))
    batch = pack_sequences(skewed_seqs(3)[:4], pack_length=72, pad_token_id=0)
    with torch.no_grad():
        got = packed_token_logprobs(windowed, batch)  # dense mask; window 8 < some sequences
    assert windowed.config._attn_implementation == "sdpa"
    assert got.shape == batch.input_ids.shape


@pytest.mark.gpu
def test_flash_varlen_on_cuda_matches_bucketed_sdpa() -> None:
    pytest.importorskip("flash_attn")
    seqs = skewed_seqs(4) + grouped_seqs(4)
    batch = pack_sequences(seqs, pack_length=72, pad_token_id=0)
    assert batch_layout(batch).shares  # flash varlen on the virtual stream, outputs picked back
    model = llama(seed=4).cuda().to(torch.bfloat16)
    with torch.no_grad():
        flash = packed_token_logprobs(model, batch)  # bf16 on CUDA: flash_attn_varlen_func
        dense = packed_token_logprobs(model, batch, attention_mask=block_causal_mask(batch.seq_ids.cuda(), torch.bfloat16))
    torch.testing.assert_close(flash, dense, rtol=0, atol=0.05)
    model32 = llama(seed=4).cuda()
    with torch.no_grad():  # fp32 on CUDA: bucketed sdpa; equal to the unpacked reference
        got = packed_token_logprobs(model32, batch)
        for i, s in enumerate(seqs):
            r, a, b = batch.spans[i]
            torch.testing.assert_close(got[r, a:b].double(), unpacked(model32, s).to(got.device), rtol=0, atol=1e-4)


@pytest.mark.gpu
def test_torch_varlen_attn_on_cuda_matches_the_dense_mask(monkeypatch) -> None:
    # The path of a CUDA image without the flash-attn package (torch >= 2.10).
    if torch_varlen_attention() is None:
        pytest.skip(f"torch {torch.__version__} has no torch.nn.attention.varlen.varlen_attn")
    monkeypatch.setitem(sys.modules, "flash_attn", None)  # as if not installed
    seqs = skewed_seqs(4) + grouped_seqs(4)
    batch = pack_sequences(seqs, pack_length=72, pad_token_id=0)
    assert batch_layout(batch).shares
    model = llama(seed=4).cuda().to(torch.bfloat16)
    q = torch.zeros(1, 1, 8, dtype=torch.bfloat16, device="cuda")
    assert attention.fused_varlen_kernel(q) is torch_varlen_attention()
    with torch.no_grad():
        fused = packed_token_logprobs(model, batch)
        dense = packed_token_logprobs(model, batch, attention_mask=block_causal_mask(batch.seq_ids.cuda(), torch.bfloat16))
    torch.testing.assert_close(fused, dense, rtol=0, atol=0.05)


def test_cpu_and_fp32_take_the_buckets() -> None:
    assert attention.fused_varlen_kernel(torch.zeros(2, 2, 4)) is None
    assert attention.fused_varlen_kernel(torch.zeros(2, 2, 4, dtype=torch.bfloat16)) is None


def test_a_saved_switched_model_loads_with_its_original_attention(tmp_path) -> None:
    """Checkpoints must stay loadable by transformers and vLLM: the switch is not saved."""
    model = llama("sdpa")
    assert enable_varlen_attention(model)
    model.save_pretrained(tmp_path)
    assert "grpo_varlen" not in (tmp_path / "config.json").read_text()
    assert LlamaForCausalLM.from_pretrained(tmp_path).config._attn_implementation == "sdpa"
