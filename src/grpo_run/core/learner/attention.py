"""Per-sequence ("varlen") attention for packed learner batches.

A packed batch's rows are flattened into one stream of real tokens (no padding), and attention
runs per sequence inside it: cost ``O(sum L_i^2)`` instead of the ``O(L_row^2)`` of a dense
block-causal mask, and the fused causal kernels instead of a masked one.

How it reaches the model: transformers' ``AttentionInterface`` dispatches on
``config._attn_implementation``. :func:`enable_varlen_attention` switches a model to a wrapper
registered under ``grpo_varlen:<original>``. The wrapper does varlen attention when the forward
carries a :class:`SequenceLayout` (keyword ``grpo_sequence_layout``, which transformers hands
through to every attention call, also when gradient checkpointing recomputes a layer), and is the
original implementation otherwise -- attention *and* mask creation -- so any other call of the
model behaves exactly as before. The switch is permanent (not undone after the forward) because
gradient checkpointing re-runs attention during ``backward``, after any context would have ended.

Kernels: on CUDA with fp16/bf16, ``flash_attn_varlen_func`` where the ``flash_attn`` package is
installed, else torch's own ``varlen_attn`` (torch >= 2.10; its causal argument is detected, as it
changed between releases), on the stream; otherwise (CPU, fp32) sequences are grouped into length buckets, each bucket gathered into
a ``[S, H, L_max, D]`` batch and run through ``scaled_dot_product_attention(is_causal=True)``.
Padding inside a bucket needs no mask: with each sequence at offset 0 of its slot, a causal query
never sees the slots past its own sequence's end (padded queries are computed and dropped).

With prompt sharing (:mod:`.layout`) attention runs on the *virtual* stream -- every sequence
whole, a shared prompt gathered into each sequence that starts with it -- and each stream token
takes the output of its own place; the gathers' backward sums the gradients of every copy.
"""

from __future__ import annotations

import contextvars
import inspect
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from grpo_run.core.compat import torch_varlen_attention
from grpo_run.core.learner.layout import SequenceLayout

LAYOUT_KWARG = "grpo_sequence_layout"
"""Forward keyword carrying the :class:`SequenceLayout` to the attention calls."""
_PREFIX = "grpo_varlen:"
SUPPORTED_ORIGINALS = ("sdpa", "eager", "flash_attention_2", "flash_attention_3")

_VARLEN_FORWARD: contextvars.ContextVar[bool] = contextvars.ContextVar("grpo_varlen_forward", default=False)


# -- the attention function ---------------------------------------------------------------


def varlen_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, layout: SequenceLayout,
    *, scaling: float | None = None, dropout: float = 0.0,
) -> torch.Tensor:
    """Causal attention per sequence of the stream. ``query``: ``[1, H, T, D]``, ``key``/``value``:
    ``[1, H_kv, T, D]`` (grouped-query heads are repeated); returns ``[1, T, H, D]``.

    With prompt sharing (``layout.shares``) each sequence attends to its virtual copy of the
    shared prompt, and each stream token takes the output of its own place.

    Under autocast the inputs are cast to its dtype first, as attention itself would cast them:
    rotary embeddings leave queries and keys in float32 beside float32 weights, and the fused
    kernels (and half the memory of the copies below) need the half-precision ones."""
    device_type = query.device.type
    if torch.is_autocast_enabled(device_type):
        low = torch.get_autocast_dtype(device_type)
        query, key, value = (t.to(low) for t in (query, key, value))
    heads = query.shape[1]
    if key.shape[1] != heads:
        key = key.repeat_interleave(heads // key.shape[1], dim=1)
        value = value.repeat_interleave(heads // value.shape[1], dim=1)
    q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))  # [T, H, D]
    kernel = fused_varlen_kernel(q, dropout)
    if kernel is not None:
        if layout.virtual is not None:  # the virtual stream: every sequence whole
            q, k, v = (t.index_select(0, layout.virtual) for t in (q, k, v))
        cu = layout.cu_seqlens.to(q.device)
        out = kernel(q.contiguous(), k.contiguous(), v.contiguous(), cu, layout.max_seqlen, scaling, dropout)
        return (out if layout.owner is None else out.index_select(0, layout.owner))[None]
    if layout.shares:
        return _shared_bucket_attention(q, k, v, layout, scaling, dropout)[None]
    pieces = []
    splits = [b.num_tokens for b in layout.buckets]
    for bucket, qs, ks, vs in zip(layout.buckets, q.split(splits), k.split(splits), v.split(splits)):
        shape = (-1, bucket.width, *qs.shape[1:])
        if bucket.gather is None:  # equal lengths: a reshape, no padding
            qb, kb, vb = (t.view(shape).transpose(1, 2) for t in (qs, ks, vs))  # [S_b, H, L_b, D]
        else:
            qb, kb, vb = (_ToSlots.apply(t, bucket.gather, bucket.valid).view(shape).transpose(1, 2)
                          for t in (qs, ks, vs))
        ob = F.scaled_dot_product_attention(qb, kb, vb, dropout_p=dropout, is_causal=True, scale=scaling)
        ob = ob.transpose(1, 2).reshape(-1, *ob.shape[1:2], ob.shape[-1])  # [S_b * L_b, H, D]
        pieces.append(ob if bucket.gather is None else _FromSlots.apply(ob, bucket.gather, bucket.valid))
    return (torch.cat(pieces) if len(pieces) > 1 else pieces[0])[None]


def _shared_bucket_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: SequenceLayout, scaling: float | None, dropout: float
) -> torch.Tensor:
    """Bucketed attention when prompts are shared: each bucket's slots are gathered straight from
    the stream (a shared prompt token fills a slot in every sequence that starts with it), and
    each stream token's output is read from its own slot. Backward of the gathers sums the
    gradient of every slot into its stream token."""
    pieces = []
    for bucket in layout.buckets:
        assert bucket.slots is not None
        qb, kb, vb = (t.index_select(0, bucket.slots).view(-1, bucket.width, *t.shape[1:]).transpose(1, 2)
                      for t in (q, k, v))  # [S_b, H, L_b, D]
        ob = F.scaled_dot_product_attention(qb, kb, vb, dropout_p=dropout, is_causal=True, scale=scaling)
        pieces.append(ob.transpose(1, 2).reshape(-1, *ob.shape[1:2], ob.shape[-1]))  # [S_b * L_b, H, D]
    slots = torch.cat(pieces) if len(pieces) > 1 else pieces[0]
    return slots.index_select(0, layout.owner_slot)


class _ToSlots(torch.autograd.Function):
    """Tokens ``[n, ...]`` -> padded slots ``[S * L, ...]`` (``x[gather]``), with a gather backward.

    Autograd's own backward of a gather is a scatter-add (``index_add_``), which is slow on CPU
    and collapses with 2+ threads (47% of a learner step at 2 threads in a profile). Here every
    token has exactly one real slot (``valid``, in token order) and the gradient of a padding
    slot is zero -- no real query attends to it causally and its own output is dropped (see
    :class:`_FromSlots`) -- so the backward is the gather ``grad[valid]``.
    """

    @staticmethod
    def forward(ctx, x, gather, valid):
        ctx.save_for_backward(valid)
        return x.index_select(0, gather)

    @staticmethod
    def backward(ctx, grad):
        (valid,) = ctx.saved_tensors
        return grad.index_select(0, valid), None, None


class _FromSlots(torch.autograd.Function):
    """Padded slots -> tokens (``y[valid]``); backward: ``grad[gather]`` with padding slots zeroed
    (a gather, not a scatter: ``gather`` maps each real slot back to its token)."""

    @staticmethod
    def forward(ctx, y, gather, valid):
        ctx.save_for_backward(gather, valid)
        ctx.num_slots = y.shape[0]
        return y.index_select(0, valid)

    @staticmethod
    def backward(ctx, grad):
        gather, valid = ctx.saved_tensors
        keep = torch.zeros(ctx.num_slots, dtype=grad.dtype, device=grad.device)
        keep[valid] = 1
        return grad.index_select(0, gather) * keep.view(-1, *[1] * (grad.dim() - 1)), None, None


VarlenKernel = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int, "float | None", float], torch.Tensor]
"""``(q, k, v, cu_seqlens, max_seqlen, scale, dropout) -> out``, each ``[T, H, D]``, causal per sequence."""


def fused_varlen_kernel(q: torch.Tensor, dropout: float = 0.0) -> VarlenKernel | None:
    """The fused varlen kernel for ``q``, or ``None`` (then length buckets of SDPA run): CUDA with
    fp16/bf16 only; the ``flash_attn`` package where it is installed, else torch's own
    ``varlen_attn`` (torch >= 2.10, no dropout)."""
    if not q.is_cuda or q.dtype not in (torch.float16, torch.bfloat16):
        return None
    try:
        from flash_attn import flash_attn_varlen_func
    except ImportError:
        return torch_varlen_attention() if dropout == 0.0 else None

    def flash(q, k, v, cu, max_len, scale, dropout):
        return flash_attn_varlen_func(q, k, v, cu, cu, max_len, max_len, dropout_p=dropout, softmax_scale=scale, causal=True)

    return flash


# -- registration with transformers -------------------------------------------------------


def _wrapper(original: str) -> Callable[..., tuple[torch.Tensor, None]]:
    def attention(module: torch.nn.Module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
        layout = kwargs.pop(LAYOUT_KWARG, None)
        if layout is None:
            return _original_attention(original, module)(
                module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
            )
        for unsupported in ("sliding_window", "softcap", "s_aux"):
            if kwargs.get(unsupported) is not None:
                raise NotImplementedError(f"varlen attention does not support {unsupported}")
        return varlen_attention(query, key, value, layout, scaling=scaling, dropout=dropout), None

    return attention


def _original_attention(original: str, module: torch.nn.Module) -> Callable:
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    if original == "eager":  # each model file defines its own eager attention
        return inspect.getmodule(type(module)).eager_attention_forward  # type: ignore[union-attr]
    return ALL_ATTENTION_FUNCTIONS[original]


def _mask_wrapper(original_mask: Callable | None) -> Callable:
    def mask(*args: Any, **kwargs: Any) -> torch.Tensor | None:
        if _VARLEN_FORWARD.get() or original_mask is None:
            return None  # the varlen forward needs no mask: sequence bounds come with the layout
        return original_mask(*args, **kwargs)

    return mask


def _register(original: str) -> str:
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
    from transformers.modeling_utils import AttentionInterface

    name = _PREFIX + original
    if name not in AttentionInterface._global_mapping:
        AttentionInterface.register(name, _wrapper(original))
        AttentionMaskInterface.register(name, _mask_wrapper(ALL_MASK_ATTENTION_FUNCTIONS._global_mapping.get(original)))
    return name


def hf_model(model: Any) -> Any:
    """The transformers model inside wrappers that hold it as ``.module`` (DDP, DeepSpeed -- whose
    engine has a ``config`` of its own, a dict, so the test is for a transformers config)."""
    from transformers import PretrainedConfig

    while not isinstance(getattr(model, "config", None), PretrainedConfig) and hasattr(model, "module"):
        model = model.module
    return model


def varlen_supported(model: Any) -> bool:
    """Whether ``model`` can run :func:`varlen_attention` (it may already do)."""
    inner = hf_model(model)
    config = getattr(inner, "config", None)
    if config is None or not getattr(inner, "_supports_attention_backend", False):
        return False
    current = config._attn_implementation or "eager"
    if current.startswith(_PREFIX):
        return True
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    windowed = getattr(text, "sliding_window", None) is not None and getattr(text, "use_sliding_window", True)
    windowed = windowed or "sliding_attention" in (getattr(text, "layer_types", None) or ())
    softcapped = getattr(text, "attn_logit_softcapping", None) is not None
    return current in SUPPORTED_ORIGINALS and not windowed and not softcapped


def enable_varlen_attention(model: Any) -> bool:
    """Switch ``model`` to the varlen wrapper of its attention (idempotent); False if unsupported."""
    if not varlen_supported(model):
        return False
    config = hf_model(model).config
    current = config._attn_implementation or "eager"
    if not current.startswith(_PREFIX):
        config._attn_implementation = _register(current)
    return True


class varlen_forward:  # noqa: N801 -- used as a context manager, like torch.no_grad
    """Marks a forward as varlen, so mask creation is skipped (the wrapper ignores a mask then)."""

    def __enter__(self) -> None:
        self._token = _VARLEN_FORWARD.set(True)

    def __exit__(self, *exc: object) -> None:
        _VARLEN_FORWARD.reset(self._token)
