"""Feature detection of the installed torch (pyproject allows torch from 2.11)."""

from __future__ import annotations

import inspect

from torch.nn.parallel import DistributedDataParallel

from grpo_run.core.learner.strategies.versions import ddp_without_buffer_sync


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
