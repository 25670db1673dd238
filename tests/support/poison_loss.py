"""A third-party loss with a bug: REINFORCE (``-ratio * A`` per token) whose value (and so its
gradient) is NaN on chosen calls, as a loss plugin that divides by a zero count would be. Named by import path,
``[loss] name = "support.poison_loss:PoisonedLoss"``, like any plugin author's loss."""

from __future__ import annotations

import os
from typing import ClassVar

import attrs
import torch

from grpo_run import LossInputs, LossOutput


@attrs.frozen
class PoisonedConfig:
    calls: tuple[int, ...] = (1,)
    """Which calls of this process (1-based) return NaN."""
    rank: str | None = None
    """Only in the learner rank with this ``RANK`` (None: in every process)."""
    value: float = float("nan")
    """What every token's loss is multiplied by on those calls (or added to, with ``add``)."""
    add: bool = False
    """Add ``value`` instead: the loss is not finite, its gradient is."""


class PoisonedLoss:
    name: ClassVar[str] = "poisoned"
    Config: ClassVar[type] = PoisonedConfig

    def __init__(self, config: PoisonedConfig | None = None) -> None:
        self.config = config if config is not None else PoisonedConfig()
        self.calls = 0

    def __call__(self, inputs: LossInputs) -> LossOutput:
        self.calls += 1
        ratio = torch.exp(torch.where(inputs.mask, inputs.logprobs - inputs.old_logprobs, 0.0))  # [R, L]
        per_token = torch.where(inputs.mask, -ratio * inputs.advantages, 0.0)  # [R, L]
        here = self.config.rank is None or os.environ.get("RANK") == self.config.rank
        if here and self.calls in self.config.calls:
            per_token = per_token + self.config.value if self.config.add else per_token * self.config.value
        return LossOutput(per_token_loss=per_token, metrics={})
