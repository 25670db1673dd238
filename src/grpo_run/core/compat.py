"""Every library-version shim in one place: what the installed torch, transformers and peft can
do, detected rather than assumed from a version floor.

pyproject.toml allows torch from 2.11 (what vLLM 0.22-0.26 pin and DeepSpeed's CI covers) and
transformers from 5.16 (vLLM 0.32/0.33 need < 5.20/5.21), and some APIs grpo-run uses appeared or
were renamed later. Each shim here names the release that changed the API and when it can go:
when pyproject's floor passes that release, keep the new spelling and delete the shim.

Nothing here imports torch, transformers or peft at module level: ``grpo_run`` re-exports
:func:`cache_keyword` for the engine plugins, and importing ``grpo_run`` stays light.

One shim lives elsewhere by necessity: the vLLM worker's ``attach_shared_memory``
(``plugins/engines/vllm/worker.py``, Python < 3.13's resource tracker) runs in vLLM's own
interpreter, which may not have ``grpo_run``.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import warnings
from collections.abc import Callable, Iterator
from typing import Any


def ddp_without_buffer_sync(ddp_class: Any = None) -> dict[str, bool]:
    """The ``DistributedDataParallel`` keyword that turns off syncing buffers before each forward.

    torch 2.13 added ``forward_sync_buffers``; older releases spell the same switch
    ``broadcast_buffers`` (2.13 still takes it, with a deprecation warning). The old switch also
    skips the buffer broadcast at construction; every rank loads the same checkpoint, so the
    buffers agree either way. Can go once pyproject requires torch >= 2.13."""
    if ddp_class is None:
        from torch.nn.parallel import DistributedDataParallel as ddp_class
    if "forward_sync_buffers" in inspect.signature(ddp_class.__init__).parameters:
        return {"forward_sync_buffers": False}
    return {"broadcast_buffers": False}


@functools.cache
def torch_varlen_attention() -> Callable[..., Any] | None:
    """``torch.nn.attention.varlen.varlen_attn`` with the causal switch of the installed release,
    as ``(q, k, v, cu_seqlens, max_seqlen, scale, dropout) -> out``; ``None`` where torch has none.

    torch 2.10 takes ``is_causal=True``, later releases ``window_size=(-1, 0)``. Can go (keep
    ``window_size``) once pyproject requires a torch that no longer takes ``is_causal``."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    params = inspect.signature(varlen_attn).parameters
    if "is_causal" in params:
        causal: dict[str, Any] = {"is_causal": True}
    elif "window_size" in params:
        causal = {"window_size": (-1, 0)}
    else:
        return None

    def kernel(q, k, v, cu, max_len, scale, dropout):
        return varlen_attn(q, k, v, cu, cu, max_len, max_len, scale=scale, **causal)

    return kernel


def enable_activation_checkpointing(model: Any) -> None:
    """Activation (gradient) checkpointing with the non-reentrant torch implementation.

    transformers 5.x renamed ``gradient_checkpointing_enable`` (now a deprecated alias that warns)
    to ``activation_checkpointing_enable``; older 5.x releases only have the former. Can go once
    pyproject's transformers floor has ``activation_checkpointing_enable``.
    """
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


@functools.cache
def cache_keyword() -> str:
    """The keyword under which the installed transformers takes a KV cache in ``generate`` and a
    model's forward: ``cache`` from 5.24 on (``past_key_values`` then warns), ``past_key_values``
    before. Read off ``generate``'s input preparation, which every causal LM shares. Can go
    (keep ``cache``) once pyproject requires transformers >= 5.24."""
    from transformers import GenerationMixin

    parameters = inspect.signature(GenerationMixin.prepare_inputs_for_generation).parameters
    return "cache" if "cache" in parameters else "past_key_values"


@contextlib.contextmanager
def peft_reading_deprecated_properties() -> Iterator[None]:
    """While open, the ``FutureWarning`` that peft raises by reading transformers' deprecated
    ``is_gradient_checkpointing`` property is not shown: it is theirs to fix and says nothing about
    the user's config. Can go once the peft that constraints.txt pins no longer reads it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield
