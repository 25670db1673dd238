"""The chunked output layer: log-probs, entropy and every gradient equal a float64 reference, the
model path equals real logits, no ``[tokens, vocab]`` tensor is kept for the backward, and a
model that changes its logits after the output layer still gets the right answer."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from support.learner import make_seqs

from grpo_run.core.learner import logprobs as logprobs_module
from grpo_run.core.learner import output_layer
from grpo_run.core.learner.logprobs import completion_logprobs
from grpo_run.core.learner.output_layer import ChunkedTokenLogprobs
from grpo_run.core.rollout.packing import pack_sequences


def _reference(hidden, weight, bias, targets, temperature):
    """float64 log-probs and entropy of the tempered softmax."""
    z = (hidden.double() @ weight.double().T + (bias.double() if bias is not None else 0.0)) / temperature
    logp = torch.log_softmax(z, dim=-1)
    picked = logp.gather(-1, targets[:, None]).squeeze(-1)
    entropy = -(logp.exp() * logp).sum(-1)
    return picked, entropy


@pytest.mark.parametrize("with_bias", [False, True])
def test_chunks_equal_the_float64_reference_with_gradients(monkeypatch, with_bias) -> None:
    monkeypatch.setattr(output_layer, "CHUNK_ELEMENTS", 7 * 50)  # 7-token chunks (the floor is 16)
    monkeypatch.setattr(output_layer, "chunk_rows", lambda vocab: 7)
    torch.manual_seed(0)
    k, h, v = 30, 12, 50  # 30 tokens: 5 chunks of 7 and one of 2
    hidden = torch.randn(k, h, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(v, h, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(v, dtype=torch.float64, requires_grad=True) if with_bias else None
    targets = torch.randint(0, v, (k,))
    grad_out = torch.randn(k, dtype=torch.float64)

    out = ChunkedTokenLogprobs.apply(hidden, weight, bias, targets, 0.7, True, torch.float64)
    want_logp, want_entropy = _reference(hidden, weight, bias, targets, 0.7)
    # float64 in, float32 out: the log-softmax runs in float32 as on the unchunked path.
    assert torch.allclose(out[:, 0].double(), want_logp, atol=1e-5, rtol=0)
    assert torch.allclose(out[:, 1].double(), want_entropy, atol=1e-5, rtol=0)

    got = torch.autograd.grad(out[:, 0].double() @ grad_out, [hidden, weight] + ([bias] if with_bias else []))
    want = torch.autograd.grad(want_logp @ grad_out, [hidden, weight] + ([bias] if with_bias else []))
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        assert torch.allclose(g, w, atol=1e-5, rtol=0)
        assert float(w.abs().max()) > 1e-2  # the gradient is not trivially zero


def _model(vocab: int = 97) -> LlamaForCausalLM:
    torch.manual_seed(3)
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0, eos_token_id=1,
    )
    return LlamaForCausalLM(config).float()


def _batch():
    return pack_sequences(make_seqs(9, seed=5), 16, 0)


def _logprobs_and_grads(model, batch, *, entropy=True):
    model.zero_grad()
    logp, ent = completion_logprobs(model, batch, temperature=0.8, entropy=entropy)
    (logp * torch.linspace(-1, 1, logp.numel()).view_as(logp)).sum().backward()
    return logp.detach(), ent, {n: p.grad.clone() for n, p in model.named_parameters()}


def test_model_through_the_chunked_head_equals_real_logits(monkeypatch) -> None:
    model, batch = _model(), _batch()
    chunked = _logprobs_and_grads(model, batch)
    monkeypatch.setattr(logprobs_module, "output_layer", lambda _model: None)  # real logits
    real = _logprobs_and_grads(model, batch)
    assert batch.completion_mask.sum() > 20
    assert torch.allclose(chunked[0], real[0], atol=1e-6, rtol=0)
    assert torch.allclose(chunked[1], real[1], atol=1e-5, rtol=0)
    for name, grad in real[2].items():
        assert torch.allclose(chunked[2][name], grad, atol=1e-6, rtol=1e-5), name


def test_no_tokens_by_vocabulary_tensor_is_saved_for_backward() -> None:
    # Every tensor autograd keeps for the backward is recorded; with real logits the [K, V]
    # logits (and their fp32 copies) are among them, with the chunked head none is that large.
    vocab = 4099  # far larger than any hidden-state tensor of this tiny model
    model, batch = _model(vocab), _batch()
    tokens = int(batch.completion_mask.sum())
    largest = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal largest
        largest = max(largest, t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        completion_logprobs(model, batch)
    embedding = vocab * 16  # the output weight itself is saved
    assert largest <= embedding < tokens * vocab


def test_a_model_that_changes_its_logits_gets_real_logits() -> None:
    class Softcapped(LlamaForCausalLM):
        def forward(self, *args, **kwargs):
            out = super().forward(*args, **kwargs)
            out.logits = 3.0 * torch.tanh(out.logits / 3.0)
            return out

    model = _model()
    capped = Softcapped(model.config)
    capped.load_state_dict(model.state_dict())
    batch = _batch()
    got, _ = completion_logprobs(capped, batch)
    mask = batch.completion_mask
    # The reference: soft-capped logits of the plain model, log-softmax in float64.
    with torch.no_grad():
        want = torch.zeros_like(got)
        for row, start, end in batch.spans:
            ids = batch.input_ids[row, start:end]
            logits = model(input_ids=ids[None], use_cache=False).logits[0].double()
            logp = torch.log_softmax(3.0 * torch.tanh(logits / 3.0), dim=-1)
            want[row, start + 1 : end] = logp[:-1].gather(-1, ids[1:, None]).squeeze(-1).float()
    assert torch.allclose(got[mask], want[mask], atol=1e-5, rtol=0)
    assert type(capped) in logprobs_module._LOGITS_CHANGED
