"""The library-version shims: each follows the signature (or attribute) it detects, and the
installed libraries accept what it returns (pyproject allows torch from 2.11, transformers from 5.16)."""

from __future__ import annotations

import inspect

import pytest
import torch
from torch.nn.parallel import DistributedDataParallel

from grpo_run.core.compat import (
    cache_keyword,
    ddp_without_buffer_sync,
    enable_activation_checkpointing,
    torch_varlen_attention,
)


class TorchBefore213DDP:  # torch 2.11 / 2.12: only the old switch
    def __init__(self, module, device_ids=None, broadcast_buffers=True, bucket_cap_mb=None) -> None: ...


class TorchFrom213DDP:  # torch 2.13: both, the old one deprecated
    def __init__(self, module, device_ids=None, broadcast_buffers=None, forward_sync_buffers=None) -> None: ...


def test_ddp_buffer_switch_follows_the_signature() -> None:
    assert ddp_without_buffer_sync(TorchBefore213DDP) == {"broadcast_buffers": False}
    assert ddp_without_buffer_sync(TorchFrom213DDP) == {"forward_sync_buffers": False}


def test_the_installed_ddp_accepts_what_the_helper_returns() -> None:
    (keyword,) = ddp_without_buffer_sync()
    assert keyword in inspect.signature(DistributedDataParallel.__init__).parameters


@pytest.mark.parametrize(("argument", "expected"), [("is_causal", {"is_causal": True}), ("window_size", {"window_size": (-1, 0)})])
def test_torch_varlen_attn_is_called_causal_in_either_signature(monkeypatch, argument, expected) -> None:
    # torch 2.10 takes is_causal, later releases a (left, right) window; (-1, 0) is causal.
    varlen = pytest.importorskip("torch.nn.attention.varlen")
    calls = []
    namespace: dict = {"calls": calls}
    exec(  # a stand-in with the release's signature
        f"def fake(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, {argument}=None, scale=None):\n"
        f"    calls.append(({argument}, scale))\n    return query",
        namespace,
    )
    monkeypatch.setattr(varlen, "varlen_attn", namespace["fake"])
    torch_varlen_attention.cache_clear()
    try:
        kernel = torch_varlen_attention()
        q = torch.zeros(3, 2, 4)
        assert kernel(q, q, q, torch.tensor([0, 3], dtype=torch.int32), 3, 0.5, 0.0) is q
    finally:
        torch_varlen_attention.cache_clear()
    assert calls == [(expected[argument], 0.5)]


class Transformers5Early:  # before the rename: only gradient_checkpointing_enable
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs=None) -> None:
        self.calls.append(("gradient", gradient_checkpointing_kwargs))


class Transformers5Late(Transformers5Early):  # after: the new name (the old one a warning alias)
    def activation_checkpointing_enable(self, activation_checkpointing_kwargs=None) -> None:
        self.calls.append(("activation", activation_checkpointing_kwargs))


def test_activation_checkpointing_takes_the_name_the_model_has() -> None:
    early, late = Transformers5Early(), Transformers5Late()
    enable_activation_checkpointing(early)
    enable_activation_checkpointing(late)
    assert early.calls == [("gradient", {"use_reentrant": False})]
    assert late.calls == [("activation", {"use_reentrant": False})]


def test_the_cache_keyword_is_one_the_installed_generate_takes() -> None:
    from transformers import GenerationMixin

    assert cache_keyword() in inspect.signature(GenerationMixin.prepare_inputs_for_generation).parameters
