"""The learning-rate schedule: linear warm-up, then constant, linear or cosine decay."""

from __future__ import annotations

import math
from collections.abc import Callable

from grpo_run.core.config.schema import OptimSection


def lr_lambda(optim: OptimSection, total_steps: int) -> Callable[[int], float]:
    """Multiplier of the base LR at a given optimizer step: linear warm-up, then the schedule."""

    def factor(step: int) -> float:
        if optim.warmup_steps and step < optim.warmup_steps:
            return (step + 1) / optim.warmup_steps
        if optim.lr_scheduler == "constant":
            return 1.0
        span = max(1, total_steps - optim.warmup_steps)
        progress = min(1.0, (step - optim.warmup_steps) / span)
        if optim.lr_scheduler == "linear":
            return 1.0 - progress
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor
