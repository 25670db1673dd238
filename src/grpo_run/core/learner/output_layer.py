"""The output layer and log-softmax in chunks of tokens: no ``[tokens, vocab]`` tensor at once.

A learner forward needs, per loss token, one number -- ``log p(token)`` -- and, when
``algorithm.log_entropy``, the entropy of the predicting distribution. Computing them from the
model's logits materialises ``[K, V]`` logits (and autograd keeps them, plus an fp32 copy per
log-softmax, until the backward): at 37k tokens and SmolLM2's 49k vocabulary that is 7 GiB per
fp32 copy, more than the rest of a 360M model's step.

:class:`ChunkedTokenLogprobs` takes the hidden states ``[K, H]`` and the output weight ``[V, H]``
instead and runs the projection, the log-softmax and the gather over chunks of
:func:`chunk_rows` tokens. The backward recomputes each chunk's logits (one more ``K x H x V``
matmul, a third of the layer's training cost) and keeps nothing of size ``V`` between chunks.
Liger Kernel and Cut Cross-Entropy do the same fused in Triton on CUDA.

How it reaches the model without changing its code or its wrappers (DDP, DeepSpeed, FSDP2 --
whose hooks gather the output weight around the output layer's own call):
:func:`token_logprobs_head` swaps the output layer's ``forward`` for one call of the model; the
layer then returns ``[1, K, 2]`` (log-prob, entropy) instead of logits, which the model passes
through as ``.logits``. A model that post-processes its logits (soft-capping, scaling) returns
another tensor; :func:`passed_through` tells, and the caller falls back to real logits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

CHUNK_ELEMENTS = 1 << 26
"""Logits per chunk (``rows x V``): 256 MiB in fp32, whatever the vocabulary."""

_POSTPROCESSED_LOGITS = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier_scale")
"""Config attributes of models that change their logits after the output layer."""


def chunk_rows(vocab_size: int) -> int:
    """Tokens per chunk for a vocabulary of ``vocab_size``."""
    return max(16, CHUNK_ELEMENTS // max(1, vocab_size))


class ChunkedTokenLogprobs(torch.autograd.Function):
    """``log softmax(hidden @ weight.T (+ bias)) / temperature)[targets]`` per row, chunked.

    ``hidden``: ``[K, H]``; ``weight``: ``[V, H]``; ``bias``: ``[V]`` or ``None``; ``targets``:
    long ``[K]``. Returns float32 ``[K, 2]``: the log-prob (differentiable) and the entropy of the
    tempered distribution (``with_entropy``; no gradient; 0 otherwise). The matmuls run in
    ``compute_dtype`` (the autocast dtype when the caller is in an autocast region), the softmax
    in float32, as the unchunked path does.
    """

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature, with_entropy, compute_dtype):  # type: ignore[override]
        rows = chunk_rows(weight.shape[0])
        out = torch.zeros(hidden.shape[0], 2, dtype=torch.float32, device=hidden.device)
        lse = torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)
        w = weight.to(compute_dtype)
        b = bias.to(compute_dtype) if bias is not None else None
        with torch.autocast(hidden.device.type, enabled=False):
            for start in range(0, hidden.shape[0], rows):
                end = min(start + rows, hidden.shape[0])
                z = _chunk_logits(hidden[start:end], w, b, compute_dtype, temperature)
                lse[start:end] = torch.logsumexp(z, dim=-1)
                out[start:end, 0] = z.gather(-1, targets[start:end, None]).squeeze(-1) - lse[start:end]
                if with_entropy:
                    out[start:end, 1] = lse[start:end] - (torch.softmax(z, dim=-1) * z).sum(-1)
        ctx.save_for_backward(hidden, weight, bias if bias is not None else torch.empty(0), targets, lse)
        ctx.has_bias = bias is not None
        ctx.temperature = temperature
        ctx.compute_dtype = compute_dtype
        return out

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        hidden, weight, bias, targets, lse = ctx.saved_tensors
        temperature, dtype = ctx.temperature, ctx.compute_dtype
        grad = grad_out[:, 0].float()  # the entropy column has no gradient
        rows = chunk_rows(weight.shape[0])
        w = weight.to(dtype)
        b = bias.to(dtype) if ctx.has_bias else None
        grad_hidden = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if ctx.needs_input_grad[1] else None
        grad_bias = torch.zeros(weight.shape[0], dtype=torch.float32, device=weight.device) if ctx.has_bias and ctx.needs_input_grad[2] else None
        with torch.autocast(hidden.device.type, enabled=False):
            for start in range(0, hidden.shape[0], rows):
                end = min(start + rows, hidden.shape[0])
                z = _chunk_logits(hidden[start:end], w, b, dtype, temperature)
                # d logp[t] / d z = onehot(t) - softmax(z); z = logits / temperature.
                dz = torch.exp(z - lse[start:end, None]).neg_()
                dz.scatter_add_(-1, targets[start:end, None], torch.ones_like(dz[:, :1]))
                dz.mul_(grad[start:end, None] / temperature)
                if grad_hidden is not None:
                    grad_hidden[start:end] = (dz.to(dtype) @ w).to(hidden.dtype)
                if grad_weight is not None:
                    h = hidden[start:end].to(dtype)
                    if dtype == torch.float32:
                        grad_weight.addmm_(dz.T, h)
                    else:  # low-precision matmul (as autocast runs it), accumulated in float32
                        grad_weight.add_(dz.to(dtype).T @ h)
                if grad_bias is not None:
                    grad_bias.add_(dz.sum(0))
        return (
            grad_hidden,
            grad_weight.to(weight.dtype) if grad_weight is not None else None,
            grad_bias.to(bias.dtype) if grad_bias is not None else None,
            None, None, None, None,
        )


def _chunk_logits(h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, dtype: torch.dtype, temperature: float) -> torch.Tensor:
    """float32 ``[rows, V]`` tempered logits of one chunk."""
    z = torch.nn.functional.linear(h.to(dtype), w, b).float()
    return z / temperature if temperature != 1.0 else z


def output_layer(model: Any) -> torch.nn.Linear | None:
    """The model's output projection when the chunked head can stand in for it: a plain
    ``nn.Linear`` whose output the model returns unchanged (``None`` otherwise)."""
    config = getattr(model, "config", None)
    for name in _POSTPROCESSED_LOGITS:
        value = getattr(config, name, None)
        if value not in (None, 1, 1.0):
            return None
    get = getattr(model, "get_output_embeddings", None)
    layer = get() if callable(get) else None
    return layer if type(layer) is torch.nn.Linear else None


@contextmanager
def token_logprobs_head(
    layer: torch.nn.Linear,
    select: Callable[[torch.Tensor], torch.Tensor],
    targets: torch.Tensor,
    temperature: float,
    with_entropy: bool,
) -> Iterator[list[torch.Tensor]]:
    """While open, one call of ``layer`` returns ``[1, K, 2]`` (log-prob, entropy) of ``targets``
    instead of logits. ``select`` maps the hidden states the model hands the layer to the ``[K, H]``
    rows that predict ``targets``. The yielded list receives the returned tensor, so the caller
    can check that the model passed it through (:func:`passed_through`)."""
    produced: list[torch.Tensor] = []

    def head(hidden: torch.Tensor) -> torch.Tensor:
        rows = select(hidden)
        device_type = rows.device.type
        dtype = torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else layer.weight.dtype
        out = ChunkedTokenLogprobs.apply(rows, layer.weight, layer.bias, targets, temperature, with_entropy, dtype)[None]
        produced.append(out)
        return out

    layer.forward = head  # type: ignore[method-assign]
    try:
        yield produced
    finally:
        del layer.forward  # the class's forward again


def passed_through(logits: torch.Tensor, produced: list[torch.Tensor]) -> bool:
    """Whether the model returned the chunked head's tensor unchanged as its logits."""
    return len(produced) == 1 and logits is produced[0]
