"""Packed log-probs equal per-sequence (unpacked) log-probs, values and gradients.

The reference runs each sequence alone through the model, with the plain causal mask that
transformers builds itself, and takes ``torch.log_softmax`` -- independent of the packed path's
varlen attention (or 4D block mask) and gather-minus-logsumexp.
"""

from __future__ import annotations

import math
import random

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from grpo_run.core.learner.logprobs import block_causal_mask, packed_token_logprobs, token_logprobs_from_logits
from grpo_run.core.rollout.packing import PackedBatch, SequenceToPack, pack_sequences

torch.set_num_threads(min(2, torch.get_num_threads()))

VOCAB = 40
PAD = 0
ATTN = ["sdpa", "eager"]
# (prompt, completion) lengths: 31 tokens in rows of at most 16 -> 3 rows, 2 with 2+ sequences.
LENGTHS = [(3, 5), (2, 2), (4, 7), (1, 3), (2, 2)]


def tiny_llama(attn: str, seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        attn_implementation=attn,
    )
    model = LlamaForCausalLM(config)
    # use_cache stays at its default (True): the trap case in which transformers stops
    # detecting packed sequences from position_ids.
    assert model.config.use_cache
    return model.train()


def make_seqs(seed: int = 0) -> list[SequenceToPack]:
    rng = random.Random(seed)
    return [
        SequenceToPack(
            prompt_ids=[rng.randrange(1, VOCAB) for _ in range(p)],
            completion_ids=[rng.randrange(1, VOCAB) for _ in range(c)],
            advantage=1.0,
            engine_logprobs=[0.0] * c,
            seq_id=i,
        )
        for i, (p, c) in enumerate(LENGTHS)
    ]


def unpacked_token_logprobs(model: torch.nn.Module, ids: list[int], temperature: float = 1.0) -> torch.Tensor:
    """``[len(ids)]``: log p(ids[t] | ids[:t]) from a forward over this sequence alone; 0 at t = 0."""
    x = torch.tensor([ids])
    logits = model(input_ids=x, use_cache=False).logits[0]
    logp = torch.log_softmax(logits[:-1].double() / temperature, dim=-1)
    picked = logp.gather(-1, x[0, 1:, None]).squeeze(-1)
    return torch.cat([picked.new_zeros(1), picked])


def unpack(batch: PackedBatch, values: torch.Tensor, i: int) -> torch.Tensor:
    r, start, end = batch.spans[i]
    return values[r, start:end]


@pytest.fixture(scope="module")
def batch() -> PackedBatch:
    b = pack_sequences(make_seqs(), pack_length=16, pad_token_id=PAD)
    assert b.num_rows >= 2 and any(len({*row.tolist()} - {-1}) >= 2 for row in b.seq_ids)
    return b


@pytest.mark.parametrize("attn", ATTN)
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_packed_equals_unpacked(attn: str, temperature: float, batch: PackedBatch) -> None:
    model = tiny_llama(attn)
    seqs = make_seqs()
    with torch.no_grad():
        packed = packed_token_logprobs(model, batch, temperature=temperature)
        assert packed.shape == batch.input_ids.shape and packed.dtype == torch.float32
        for i, s in enumerate(seqs):
            ref = unpacked_token_logprobs(model, s.prompt_ids + s.completion_ids, temperature)
            torch.testing.assert_close(unpack(batch, packed, i).double(), ref, rtol=0, atol=1e-5)
            assert unpack(batch, packed, i)[0] == 0  # no prediction for a first token
    assert (packed[batch.seq_ids < 0] == 0).all()  # nor on padding
    with torch.no_grad():  # the dense path (a mask built by the caller) gives the same values
        mask = block_causal_mask(batch.seq_ids)
        dense = packed_token_logprobs(model, batch, temperature=temperature, attention_mask=mask)
    torch.testing.assert_close(dense, packed, rtol=0, atol=1e-5)


@pytest.mark.parametrize("attn", ATTN)
def test_packed_gradients_equal_unpacked(attn: str, batch: PackedBatch) -> None:
    seqs = make_seqs()
    gen = torch.Generator().manual_seed(1)
    weights = torch.randn(batch.input_ids.shape, generator=gen)  # a random per-token objective

    model = tiny_llama(attn)
    (packed_token_logprobs(model, batch) * weights).sum().backward()
    packed_grads = {n: p.grad.clone() for n, p in model.named_parameters()}

    model.zero_grad()
    for i, s in enumerate(seqs):
        ref = unpacked_token_logprobs(model, s.prompt_ids + s.completion_ids)
        (ref * unpack(batch, weights, i).double()).sum().backward()
    for name, p in model.named_parameters():
        torch.testing.assert_close(packed_grads[name], p.grad, rtol=1e-5, atol=1e-6, msg=name)
        assert p.grad.abs().max() > 0, name  # every parameter takes part


@pytest.mark.parametrize("attn", ATTN)
def test_without_isolation_values_differ(attn: str, batch: PackedBatch) -> None:
    """The equality test can fail: a plain causal mask over the row lets sequences leak."""
    model = tiny_llama(attn)
    one_block = torch.where(batch.seq_ids >= 0, 0, -1)  # every real token in one "sequence"
    with torch.no_grad():
        logits = model(
            input_ids=batch.input_ids,
            attention_mask=block_causal_mask(one_block),
            position_ids=batch.position_ids,
            use_cache=False,
        ).logits
        leaky = token_logprobs_from_logits(logits, batch.input_ids)
        isolated = packed_token_logprobs(model, batch)
    later = batch.completion_mask & (batch.seq_ids != batch.seq_ids[:, :1])  # not in a row's first sequence
    assert later.any()
    assert (leaky - isolated)[later].abs().max() > 1e-2


def test_block_causal_mask_pattern() -> None:
    seq_ids = torch.tensor([[0, 0, 1, 1, 1, -1]])
    allowed = block_causal_mask(seq_ids)[0, 0] == 0
    expected = torch.tensor(
        [
            [1, 0, 0, 0, 0, 0],
            [1, 1, 0, 0, 0, 0],
            [0, 0, 1, 0, 0, 0],
            [0, 0, 1, 1, 0, 0],
            [0, 0, 1, 1, 1, 0],
            [0, 0, 0, 0, 0, 1],
        ],
        dtype=torch.bool,
    )
    assert torch.equal(allowed, expected)
    mask = block_causal_mask(seq_ids, torch.bfloat16)
    assert mask.shape == (1, 1, 6, 6) and mask.dtype == torch.bfloat16
    assert mask.min() == torch.finfo(torch.bfloat16).min


def test_token_logprobs_from_logits_hand_computed() -> None:
    # Row [0, 1]: the logits at t=0 are [0, log 3] -> p = [1/4, 3/4], so out[1] = log 0.75.
    # Temperature 2 -> logits [0, log(3) / 2] -> p(1) = sqrt(3) / (1 + sqrt(3)) = 0.633975.
    logits = torch.zeros(1, 2, 2)
    logits[0, 0, 1] = math.log(3.0)
    ids = torch.tensor([[0, 1]])
    out = token_logprobs_from_logits(logits, ids)
    torch.testing.assert_close(out, torch.tensor([[0.0, math.log(0.75)]]))
    out = token_logprobs_from_logits(logits, ids, temperature=2.0)
    torch.testing.assert_close(out, torch.tensor([[0.0, math.log(3**0.5 / (1 + 3**0.5))]]))


def test_engine_logprobs_alignment() -> None:
    """Engine log-probs packed at completion positions line up with the learner's log-probs."""
    model = tiny_llama("sdpa", seed=3).eval()
    seqs = []
    with torch.no_grad():
        for s in make_seqs(seed=4):
            ref = unpacked_token_logprobs(model, s.prompt_ids + s.completion_ids)
            engine = ref[len(s.prompt_ids) :].float().tolist()  # what a faithful engine reports
            seqs.append(SequenceToPack(s.prompt_ids, s.completion_ids, 1.0, engine, s.seq_id))
        batch = pack_sequences(seqs, pack_length=16, pad_token_id=PAD)
        learner = packed_token_logprobs(model, batch)
    m = batch.completion_mask
    torch.testing.assert_close(learner[m], batch.engine_logprobs[m], rtol=0, atol=1e-5)


def test_bf16_autocast_runs_and_is_close(batch: PackedBatch) -> None:
    model = tiny_llama("sdpa")
    with torch.no_grad():
        exact = packed_token_logprobs(model, batch)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            approx = packed_token_logprobs(model, batch)
    assert approx.dtype == torch.float32
    torch.testing.assert_close(approx, exact, rtol=0, atol=0.1)


def test_temperature_must_be_positive(batch: PackedBatch) -> None:
    with pytest.raises(ValueError, match="temperature must be > 0"):
        packed_token_logprobs(tiny_llama("sdpa"), batch, temperature=0.0)
