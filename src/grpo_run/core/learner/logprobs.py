"""Per-token log-probs of a causal LM over packed rows, with sequences isolated from each other.

Isolation uses an explicit 4D additive block-diagonal causal mask (0 = attend, ``finfo.min`` =
blocked) built from ``seq_ids``. Why not rely on restarting ``position_ids``: transformers 5.x
only detects packed sequences from ``position_ids`` when there is no KV cache, and
``config.use_cache`` defaults to True even in ``train()``; then sequences silently attend to each
other. A 4D mask is passed through unchanged by transformers' mask creation and honoured by both
the ``sdpa`` and ``eager`` attention; it has to be *float additive* because eager adds it to the
scores and would misread a bool mask. ``position_ids`` are still passed (RoPE needs the restarts)
and ``use_cache=False`` too (no cache is wanted in a learner forward).

Cost: the mask is ``[R, 1, L, L]`` in the model's dtype (1 MiB per 512-token fp32 row); for very
long rows on GPU, flash-attention varlen via ``position_ids`` is the better route.
"""

from __future__ import annotations

from typing import Any

import torch

from grpo_run.core.rollout.packing import PackedBatch


def block_causal_mask(seq_ids: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Additive ``[R, 1, L, L]`` mask letting query ``q`` see key ``k`` iff ``k <= q`` in the same sequence.

    ``seq_ids``: long ``[R, L]``. Padding (-1) forms one more block; being at the row's end it
    sees only padding, and every query sees at least itself, so no softmax row is fully masked.
    """
    length = seq_ids.shape[1]
    pos = torch.arange(length, device=seq_ids.device)
    causal = pos[None, :] <= pos[:, None]  # [L(q), L(k)]
    same_seq = seq_ids[:, :, None] == seq_ids[:, None, :]  # [R, L(q), L(k)]
    allowed = same_seq & causal
    mask = torch.zeros(allowed.shape, dtype=dtype, device=seq_ids.device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[:, None]


def token_logprobs_from_logits(
    logits: torch.Tensor, input_ids: torch.Tensor, *, temperature: float = 1.0
) -> torch.Tensor:
    """``out[r, t] = log softmax(logits[r, t-1] / temperature)[input_ids[r, t]]``; ``out[:, 0] = 0``.

    ``logits``: ``[R, L, V]``, ``input_ids``: long ``[R, L]``; returns float32 ``[R, L]``.
    Computed as gathered logit minus logsumexp, one row at a time, so no full ``[R, L, V]``
    log-softmax copy (or fp32 upcast of bf16 logits) exists at once.
    """
    num_rows, length = input_ids.shape
    if length < 2 or num_rows == 0:
        return logits.new_zeros((num_rows, length), dtype=torch.float32)
    targets = input_ids[:, 1:]
    rows = []
    for r in range(num_rows):
        row = logits[r, :-1].float()  # [L-1, V]; no copy when already fp32
        if temperature != 1.0:
            row = row / temperature
        picked = row.gather(-1, targets[r, :, None]).squeeze(-1)  # [L-1]
        rows.append(picked - torch.logsumexp(row, dim=-1))
    return torch.nn.functional.pad(torch.stack(rows), (1, 0))  # nothing predicts position 0


def packed_token_logprobs(
    model: Any,
    batch: PackedBatch,
    *,
    temperature: float = 1.0,
    attention_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Log-prob of every token of ``batch`` under ``model``, each sequence seeing only itself.

    ``model`` is a transformers causal LM (Llama-style: takes ``input_ids``, ``attention_mask``,
    ``position_ids``; returns ``.logits``). ``temperature`` must be the sampling temperature, so
    the result is comparable with the engine's log-probs. ``attention_mask`` may pass a
    :func:`block_causal_mask` of ``batch.seq_ids`` built once for several forwards of the same
    batch (policy, old policy, reference); by default it is built here.

    Returns float32 ``[R, L]``: at ``t``, ``log p(input_ids[t] | earlier tokens of its sequence)``;
    0 at each sequence's first token and on padding (there is no prediction there).
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    device = next(model.parameters()).device
    dtype = getattr(model, "dtype", torch.float32)
    input_ids = batch.input_ids.to(device)
    seq_ids = batch.seq_ids.to(device)
    if attention_mask is None:
        attention_mask = block_causal_mask(seq_ids, dtype)
    logits = model(
        input_ids=input_ids,
        attention_mask=attention_mask.to(device),
        position_ids=batch.position_ids.to(device),
        use_cache=False,
    ).logits
    logprobs = token_logprobs_from_logits(logits, input_ids, temperature=temperature)
    # A prediction exists where the previous token belongs to the same (real) sequence.
    has_prev = torch.zeros_like(seq_ids, dtype=torch.bool)
    has_prev[:, 1:] = (seq_ids[:, 1:] == seq_ids[:, :-1]) & (seq_ids[:, 1:] >= 0)
    return torch.where(has_prev, logprobs, torch.zeros_like(logprobs))
