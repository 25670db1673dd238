"""DAPO's clipped surrogate with decoupled ("clip-higher") clipping.

Yu et al., "DAPO: An Open-Source LLM Reinforcement Learning System at Scale",
https://arxiv.org/abs/2503.14476 (section 3.1: a larger upper clip bound keeps low-probability
tokens explorable; the paper pairs it with token-level aggregation, ``"token-mean"``).
"""

from __future__ import annotations

from typing import ClassVar

import attrs

from grpo_run import LossInputs, LossOutput
from grpo_run.plugins.losses.common import DELTA_VALIDATOR, LOWER_CLIP_VALIDATOR, clipped_surrogate_loss


@attrs.frozen
class DapoConfig:
    """Options of the ``dapo`` loss."""

    clip_lower: float = attrs.field(default=0.2, validator=LOWER_CLIP_VALIDATOR)
    """epsilon_low: the ratio is clipped below at ``1 - clip_lower`` (in ``[0, 1)``)."""
    clip_higher: float = attrs.field(default=0.28, validator=attrs.validators.ge(0.0))
    """epsilon_high: the ratio is clipped above at ``1 + clip_higher`` (``>= 0``)."""
    delta: float | None = attrs.field(default=None, validator=DELTA_VALIDATOR)
    """Dual clip (``> 1``): a negative-advantage token's loss is capped at ``-delta * A``, so a ratio
    above ``delta`` no longer pushes it down. ``None`` (the default) turns it off."""


class DapoLoss:
    """Token-level PPO-style clipped surrogate with separate lower and upper clip bounds.

    ``ratio = exp(logprobs - old_logprobs)`` and, per token,
    ``loss = -min(ratio * A, clip(ratio, 1 - clip_lower, 1 + clip_higher) * A)``, 0 off the mask.
    When the clipped branch is the minimum the token has zero gradient: a positive-advantage
    token whose ratio is above ``1 + clip_higher`` (counted in ``clip_frac_high``) or a
    negative-advantage token whose ratio is below ``1 - clip_lower`` (``clip_frac_low``).
    With ``delta`` set, a negative-advantage token whose ratio exceeds ``delta`` has its loss
    capped at ``-delta * A`` (zero gradient, counted in ``clip_frac_dual``).
    """

    name: ClassVar[str] = "dapo"
    Config: ClassVar[type] = DapoConfig

    def __init__(self, config: DapoConfig | None = None) -> None:
        self.config = config if config is not None else DapoConfig()

    def __call__(self, inputs: LossInputs) -> LossOutput:
        low, high = 1.0 - self.config.clip_lower, 1.0 + self.config.clip_higher
        return clipped_surrogate_loss(inputs, low, high, self.config.delta)
