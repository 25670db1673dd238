"""Per-token log-probs of a causal LM over packed rows, with sequences isolated from each other.

Two ways to keep sequences apart, chosen per model:

* **varlen** (the default where the model supports it, see :mod:`.attention`): the rows are
  flattened into one stream of real tokens and attention runs per sequence -- no padding tokens
  through the layers, no ``O(L_row^2)`` mask, fused causal kernels.
* **dense**: an explicit 4D additive block-diagonal causal mask built from ``seq_ids`` (0 =
  attend, ``finfo.min`` = blocked), for models that cannot take a custom attention function, or
  when the caller passes a mask. It has to be *float additive* because eager attention adds it to
  the scores and would misread a bool mask. Why not rely on restarting ``position_ids``:
  transformers 5.x only detects packed sequences from them when there is no KV cache, and
  ``config.use_cache`` defaults to True even in ``train()``; then sequences silently attend to
  each other. ``position_ids`` are still passed (RoPE needs the restarts), ``use_cache=False`` too.

Only the tokens whose log-prob is asked for reach the output layer (``logits_to_keep``), and
there the output projection, log-softmax and gather run in chunks of tokens
(:mod:`.output_layer`): no ``[tokens, V]`` logits tensor exists, in the forward or the backward.
Models that post-process their logits get real logits, with the log-softmax taken over chunks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import torch

from grpo_run.core.learner.attention import LAYOUT_KWARG, enable_varlen_attention, hf_model, varlen_forward
from grpo_run.core.learner.layout import SequenceLayout, sequence_layout
from grpo_run.core.learner.output_layer import output_layer, passed_through, token_logprobs_head
from grpo_run.core.rollout.packing import PackedBatch

LOGSUMEXP_CHUNK = 2048
"""Positions per logsumexp chunk: bounds the fp32 temporaries at ``2048 x V``."""


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


def batch_layout(batch: PackedBatch, *, share_prompts: bool = True) -> SequenceLayout:
    """The varlen layout of ``batch`` (build it once for several forwards of the same batch).

    ``share_prompts``: sequences that start with the same prompt (the tokens before their first
    completion token) share one copy of it in the stream (see :mod:`.layout`)."""
    prefixes = prompt_prefixes(batch) if share_prompts else None
    return sequence_layout(batch.spans, batch.row_length, prefixes).to(batch.input_ids.device)


def prompt_prefixes(batch: PackedBatch) -> list[tuple[int, ...] | None]:
    """Per sequence of ``batch``, its prompt: the tokens before its first completion token (None
    when it has no completion token)."""
    ids = batch.input_ids.tolist()
    completion = batch.completion_mask.tolist()
    out: list[tuple[int, ...] | None] = []
    for row, start, end in batch.spans:
        marks = completion[row][start:end]
        first = marks.index(True) if True in marks else -1
        out.append(tuple(ids[row][start : start + first]) if first > 0 else None)
    return out


def token_logprobs_from_logits(
    logits: torch.Tensor, input_ids: torch.Tensor, *, temperature: float = 1.0
) -> torch.Tensor:
    """``out[r, t] = log softmax(logits[r, t-1] / temperature)[input_ids[r, t]]``; ``out[:, 0] = 0``.

    ``logits``: ``[R, L, V]``, ``input_ids``: long ``[R, L]``; returns float32 ``[R, L]``.
    """
    num_rows, length = input_ids.shape
    if length < 2 or num_rows == 0:
        return logits.new_zeros((num_rows, length), dtype=torch.float32)
    picked = [_picked_logprobs(logits[r, :-1], input_ids[r, 1:], temperature) for r in range(num_rows)]
    return torch.nn.functional.pad(torch.stack(picked), (1, 0))  # nothing predicts position 0


def _picked_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    """``[K, V]`` logits and ``[K]`` targets -> float32 ``[K]`` log-probs, chunked over K."""
    out = []
    for start in range(0, max(1, logits.shape[0]), LOGSUMEXP_CHUNK):
        chunk = logits[start : start + LOGSUMEXP_CHUNK].float()  # no copy when already fp32
        if temperature != 1.0:
            chunk = chunk / temperature
        picked = chunk.gather(-1, targets[start : start + LOGSUMEXP_CHUNK, None]).squeeze(-1)
        out.append(picked - torch.logsumexp(chunk, dim=-1))
    return torch.cat(out) if len(out) > 1 else out[0]


@torch.no_grad()
def _entropy(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Entropy of ``softmax(logits / temperature)`` per row of ``[K, V]``: ``log Z - sum p z``."""
    out = []
    for start in range(0, max(1, logits.shape[0]), LOGSUMEXP_CHUNK):
        z = logits[start : start + LOGSUMEXP_CHUNK].detach().float() / temperature
        out.append(torch.logsumexp(z, dim=-1) - (torch.softmax(z, dim=-1) * z).sum(-1))
    return torch.cat(out) if len(out) > 1 else out[0]


def packed_token_logprobs(
    model: Any,
    batch: PackedBatch,
    *,
    temperature: float = 1.0,
    attention_mask: torch.Tensor | None = None,
    layout: SequenceLayout | None = None,
) -> torch.Tensor:
    """Log-prob of every token of ``batch`` under ``model``, each sequence seeing only itself.

    ``model`` is a transformers causal LM (takes ``input_ids``, ``position_ids``,
    ``logits_to_keep``; returns ``.logits``). ``temperature`` must be the sampling temperature,
    so the result is comparable with the engine's log-probs. ``attention_mask`` (a
    :func:`block_causal_mask` of ``batch.seq_ids``) forces the dense path; ``layout`` (from
    :func:`batch_layout`) may be built once for several forwards of the same batch.

    Returns float32 ``[R, L]``: at ``t``, ``log p(input_ids[t] | earlier tokens of its sequence)``;
    0 at each sequence's first token and on padding (there is no prediction there).
    """
    logprobs, _ = _wanted_token_logprobs(model, batch, batch.seq_ids >= 0, temperature, attention_mask, layout, False)
    return logprobs


def completion_logprobs(
    model: Any,
    batch: PackedBatch,
    *,
    temperature: float = 1.0,
    layout: SequenceLayout | None = None,
    entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (and, with ``entropy``, the no-grad entropy of the predicting distribution) of
    the tokens in ``batch.completion_mask`` only: float32 ``[R, L]``, 0 elsewhere. Equal to
    :func:`packed_token_logprobs` on the mask; logits exist only for those tokens."""
    return _wanted_token_logprobs(model, batch, batch.completion_mask, temperature, None, layout, entropy)


def _wanted_token_logprobs(
    model: Any,
    batch: PackedBatch,
    wanted: torch.Tensor,
    temperature: float,
    attention_mask: torch.Tensor | None,
    layout: SequenceLayout | None,
    entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs ``[R, L]`` (float32) of the tokens where ``wanted`` is true, 0 elsewhere, and with
    ``entropy`` the no-grad entropy of their predicting distributions (else ``None``): varlen
    attention when the model takes it and no ``attention_mask`` is given, a dense forward otherwise."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    device = next(model.parameters()).device
    if attention_mask is None and enable_varlen_attention(model):
        call = _varlen_call(batch, wanted, layout, device)
    else:
        call = _dense_call(model, batch, wanted, attention_mask, device)
    picked, ent_values = _predict(model, call, temperature, entropy)
    flat = batch.input_ids.numel()
    logprobs = torch.zeros(flat, dtype=torch.float32, device=device)
    logprobs = logprobs.index_put((call.where,), picked)
    ent = None
    if ent_values is not None:
        ent = torch.zeros(flat, dtype=torch.float32, device=device)
        ent[call.where] = ent_values
        ent = ent.view(batch.input_ids.shape)
    return logprobs.view(batch.input_ids.shape), ent


@attrs.frozen
class _Call:
    """One model forward for the wanted tokens: its keyword arguments, how to pick the ``[K, .]``
    rows that predict them from what the output layer sees (hidden states or logits), their ids
    ``[K]`` and their flat positions ``[K]`` in the batch."""

    kwargs: dict[str, Any]
    select: Callable[[torch.Tensor], torch.Tensor]
    targets: torch.Tensor
    where: torch.Tensor
    varlen: bool


_LOGITS_CHANGED: set[type] = set()
"""Model classes that post-process the output layer's result: they get real logits."""


def _predict(model: Any, call: _Call, temperature: float, entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs ``[K]`` (and entropy) of the call's targets: through the chunked output layer
    where the model allows it (:mod:`.output_layer`), else from its logits."""
    inner = hf_model(model)
    layer = output_layer(inner) if type(inner) not in _LOGITS_CHANGED else None
    if layer is not None:
        with token_logprobs_head(layer, call.select, call.targets, temperature, entropy) as produced:
            out = _run(model, call)
        if passed_through(out, produced):
            return out[0, :, 0], (out[0, :, 1].detach() if entropy else None)
        _LOGITS_CHANGED.add(type(inner))  # e.g. soft-capped logits: compute them for real from now on
    logits = call.select(_run(model, call))
    return _picked_logprobs(logits, call.targets, temperature), (_entropy(logits, temperature) if entropy else None)


def _run(model: Any, call: _Call) -> torch.Tensor:
    if call.varlen:
        with varlen_forward():
            return model(**call.kwargs).logits
    return model(**call.kwargs).logits


def _varlen_call(batch: PackedBatch, wanted: torch.Tensor, layout: SequenceLayout | None, device: torch.device) -> _Call:
    layout = (layout if layout is not None else batch_layout(batch)).to(device)
    flat_ids = batch.input_ids.to(device).flatten()
    stream = flat_ids[layout.token_index]  # [T]
    flat = layout.flat_positions()  # [V]: every sequence whole, shared prompts included
    # A wanted token with a predecessor in its sequence is predicted by the token before it there
    # (in the virtual stream; for the first token after a shared prompt, the prompt's last token).
    targets = torch.nonzero(wanted.to(device).flatten()[flat] & (layout.sequence_positions() > 0))[:, 0]
    kwargs = {
        "input_ids": stream[None],
        "position_ids": layout.position_ids,
        "use_cache": False,
        "logits_to_keep": layout.stream_of_virtual()[targets - 1],
        LAYOUT_KWARG: layout,
    }
    return _Call(kwargs, _first_row, flat_ids[flat[targets]], flat[targets], varlen=True)


def _first_row(x: torch.Tensor) -> torch.Tensor:
    return x[0]


def _dense_call(
    model: Any, batch: PackedBatch, wanted: torch.Tensor, attention_mask: torch.Tensor | None, device: torch.device
) -> _Call:
    input_ids = batch.input_ids.to(device)
    seq_ids = batch.seq_ids.to(device)
    if attention_mask is None:
        attention_mask = block_causal_mask(seq_ids, getattr(model, "dtype", torch.float32))
    kwargs = {
        "input_ids": input_ids,
        "attention_mask": attention_mask.to(device),
        "position_ids": batch.position_ids.to(device),
        "use_cache": False,
    }
    # A prediction exists where the previous token belongs to the same (real) sequence.
    has_prev = torch.zeros_like(seq_ids, dtype=torch.bool)
    has_prev[:, 1:] = (seq_ids[:, 1:] == seq_ids[:, :-1]) & (seq_ids[:, 1:] >= 0)
    where = torch.nonzero((wanted.to(device) & has_prev).flatten())[:, 0]

    def select(x: torch.Tensor) -> torch.Tensor:
        return x.flatten(0, 1)[where - 1]  # the previous position of the same row

    return _Call(kwargs, select, input_ids.flatten()[where], where, varlen=False)
