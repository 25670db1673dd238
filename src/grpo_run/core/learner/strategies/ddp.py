"""``strategy = "ddp"``: torch DistributedDataParallel.

Every rank holds the whole policy and optimizer; DDP averages gradients over ranks during the
backward pass, so after clipping (the same norm everywhere) every rank takes the same step and the
replicas stay identical. The optimizer state is therefore rank 0's, in the single process's
format: a ddp checkpoint resumes under ``single`` and the other way round.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from grpo_run.core.config.schema import OptimSection
from grpo_run.core.learner.strategies.parallel import DataParallel
from grpo_run.core.compat import ddp_without_buffer_sync


class DDPStrategy(DataParallel):
    name = "ddp"

    def setup(self, policy: torch.nn.Module, optim: OptimSection, max_grad_norm: float) -> torch.optim.Optimizer:
        optimizer = super().setup(policy, optim, max_grad_norm)
        device_ids = [self.device.index] if self.device.type == "cuda" else None
        # Buffers (rotary tables) never change: no broadcast before every forward.
        self.wrapped = DistributedDataParallel(policy, device_ids=device_ids, **ddp_without_buffer_sync())
        return optimizer

    @property
    def train_module(self) -> Any:
        return self.wrapped  # its backward hooks all-reduce the gradients

    @contextmanager
    def accumulate(self, last: bool) -> Iterator[None]:
        # no_sync must hold the forward too: DDP decides there whether the backward all-reduces.
        with nullcontext() if last else self.wrapped.no_sync():
            yield
