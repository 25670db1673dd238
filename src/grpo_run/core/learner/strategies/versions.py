"""What the installed torch can do, detected rather than assumed from a version floor.

pyproject.toml allows torch from 2.11 (what vLLM 0.22-0.26 pin and DeepSpeed's CI covers), and
some arguments the strategies pass appeared later. Each helper here inspects the installed torch
once and returns what it accepts."""

from __future__ import annotations

import inspect
from typing import Any


def ddp_without_buffer_sync(ddp_class: Any = None) -> dict[str, bool]:
    """The ``DistributedDataParallel`` keyword that turns off syncing buffers before each forward.

    torch 2.13 added ``forward_sync_buffers``; older releases spell the same switch
    ``broadcast_buffers`` (2.13 still takes it, with a deprecation warning). The old switch also
    skips the buffer broadcast at construction; every rank loads the same checkpoint, so the
    buffers agree either way."""
    if ddp_class is None:
        from torch.nn.parallel import DistributedDataParallel as ddp_class
    if "forward_sync_buffers" in inspect.signature(ddp_class.__init__).parameters:
        return {"forward_sync_buffers": False}
    return {"broadcast_buffers": False}
