"""DAPO's clipped surrogate with decoupled ("clip-higher") clipping.

Yu et al., "DAPO: An Open-Source LLM Reinforcement Learning System at Scale",
https://arxiv.org/abs/2503.14476 (section 3.1: a larger upper clip bound keeps low-probability
tokens explorable; the paper pairs it with token-level aggregation, ``"token-mean"``).
"""

from __future__ import annotations

from typing import ClassVar

import attrs
import torch

from grpo_run import LossInputs, LossOutput


@attrs.frozen
class DapoConfig:
    """Options of the ``dapo`` loss."""

    clip_lower: float = attrs.field(default=0.2, validator=[attrs.validators.ge(0.0), attrs.validators.lt(1.0)])
    """epsilon_low: the ratio is clipped below at ``1 - clip_lower`` (in ``[0, 1)``)."""
    clip_higher: float = attrs.field(default=0.28, validator=attrs.validators.ge(0.0))
    """epsilon_high: the ratio is clipped above at ``1 + clip_higher`` (``>= 0``)."""


class DapoLoss:
    """Token-level PPO-style clipped surrogate with separate lower and upper clip bounds.

    ``ratio = exp(logprobs - old_logprobs)`` and, per token,
    ``loss = -min(ratio * A, clip(ratio, 1 - clip_lower, 1 + clip_higher) * A)``, 0 off the mask.
    When the clipped branch is the minimum the token has zero gradient: a positive-advantage
    token whose ratio is above ``1 + clip_higher`` (counted in ``clip_frac_high``) or a
    negative-advantage token whose ratio is below ``1 - clip_lower`` (``clip_frac_low``).
    """

    name: ClassVar[str] = "dapo"
    Config: ClassVar[type] = DapoConfig

    def __init__(self, config: DapoConfig | None = None) -> None:
        self.config = config if config is not None else DapoConfig()

    def __call__(self, inputs: LossInputs) -> LossOutput:
        mask = inputs.mask  # bool [R, L]
        adv = inputs.advantages  # [R, L]
        # Zero the log-ratio off the mask *before* exp: padding may hold anything, and an inf
        # there would turn into NaN gradients through the final where.
        log_ratio = torch.where(mask, inputs.logprobs - inputs.old_logprobs, torch.zeros_like(inputs.logprobs))
        ratio = torch.exp(log_ratio)  # [R, L]
        low, high = 1.0 - self.config.clip_lower, 1.0 + self.config.clip_higher
        unclipped = ratio * adv
        clipped = torch.clamp(ratio, low, high) * adv
        per_token = torch.where(mask, -torch.minimum(unclipped, clipped), torch.zeros_like(unclipped))

        with torch.no_grad():
            n = mask.sum().clamp(min=1).to(ratio.dtype)
            clip_low = mask & (ratio < low) & (adv < 0)
            clip_high = mask & (ratio > high) & (adv > 0)
            metrics = {
                "clip_frac_low": clip_low.sum() / n,
                "clip_frac_high": clip_high.sum() / n,
                "ratio_mean": torch.where(mask, ratio, torch.zeros_like(ratio)).sum() / n,
            }
        return LossOutput(per_token_loss=per_token, metrics=metrics)
