"""REINFORCE with the group baseline (the group-relative advantage is the baselined return).

Williams, "Simple statistical gradient-following algorithms for connectionist reinforcement
learning", Machine Learning 8 (1992); the group mean as baseline as in RLOO / GRPO.

Per completion token ``t`` with advantage ``A`` and ``ratio = pi_theta(t) / pi_old(t)``::

    loss_t = -min(ratio, max_ratio) * A

On-policy (one update per batch) ``ratio == 1`` and the gradient is ``-A * grad log pi_theta(t)``,
plain REINFORCE. With several updates per batch the ratio keeps the estimate importance-weighted;
above ``max_ratio`` it is clamped, which stops the gradient of that token.
"""

from __future__ import annotations

from typing import ClassVar

import attrs
import torch

from grpo_run import LossInputs, LossOutput


@attrs.frozen
class ReinforceBaselineConfig:
    """Options of the ``reinforce-baseline`` loss."""

    max_ratio: float = attrs.field(default=10.0, validator=attrs.validators.gt(1.0))
    """Importance ratios above this are clamped (no gradient through them); must be > 1."""


class ReinforceBaselineLoss:
    """``-min(ratio, max_ratio) * A`` per completion token; the engine aggregates it."""

    name: ClassVar[str] = "reinforce-baseline"
    Config: ClassVar[type] = ReinforceBaselineConfig

    def __init__(self, config: ReinforceBaselineConfig | None = None) -> None:
        self.config = config if config is not None else ReinforceBaselineConfig()

    def __call__(self, inputs: LossInputs) -> LossOutput:
        mask = inputs.mask  # bool [R, L]: completion tokens that count
        # Zero the log-ratio off the mask before exp, so padding cannot overflow into NaN grads.
        log_ratio = torch.where(mask, inputs.logprobs - inputs.old_logprobs, torch.zeros_like(inputs.logprobs))
        ratio = torch.exp(log_ratio)  # [R, L]
        per_token = -torch.clamp(ratio, max=self.config.max_ratio) * inputs.advantages  # [R, L]
        per_token = torch.where(mask, per_token, torch.zeros_like(per_token))
        with torch.no_grad():
            n = mask.sum().clamp(min=1)
            metrics = {
                "ratio_mean": torch.where(mask, ratio, torch.zeros_like(ratio)).sum() / n,
                "clip_frac": (mask & (ratio > self.config.max_ratio)).sum() / n,
            }
        return LossOutput(per_token_loss=per_token, metrics=metrics)
