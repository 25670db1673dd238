"""GRPO's clipped surrogate (symmetric PPO clip on a group-relative advantage).

Shao et al., "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models",
https://arxiv.org/abs/2402.03300 (section 4.1). The objective averages each completion's
token terms, then averages over completions: configure ``algorithm.loss_aggregation =
"seq-mean-token-mean"`` to reproduce it. The paper's KL term is the engine's ``[kl]`` slot
(``k3`` there).
"""

from __future__ import annotations

from typing import ClassVar

import attrs

from grpo_run import LossInputs, LossOutput
from grpo_run.plugins.losses.common import DELTA_VALIDATOR, LOWER_CLIP_VALIDATOR, clipped_surrogate_loss


@attrs.frozen
class GrpoConfig:
    """Options of the ``grpo`` loss."""

    clip: float = attrs.field(default=0.2, validator=LOWER_CLIP_VALIDATOR)
    """epsilon: the ratio is clipped to ``[1 - clip, 1 + clip]`` (in ``[0, 1)``)."""
    delta: float | None = attrs.field(default=None, validator=DELTA_VALIDATOR)
    """Dual clip (``> 1``): a negative-advantage token's loss is capped at ``-delta * A``, so a ratio
    above ``delta`` no longer pushes it down. ``None`` (the default) turns it off."""


class GrpoLoss:
    """Per-token ``-min(ratio * A, clip(ratio, 1 - clip, 1 + clip) * A)``, 0 off the mask.

    ``ratio = exp(logprobs - old_logprobs)``. Tokens where the clipped branch wins have zero
    gradient: ``clip_frac_high`` counts A > 0 with ratio above ``1 + clip``, ``clip_frac_low``
    A < 0 with ratio below ``1 - clip``, and ``clip_frac_dual`` (only with ``delta``) A < 0 with
    ratio above ``delta``.
    """

    name: ClassVar[str] = "grpo"
    Config: ClassVar[type] = GrpoConfig

    def __init__(self, config: GrpoConfig | None = None) -> None:
        self.config = config if config is not None else self.Config()

    def __call__(self, inputs: LossInputs) -> LossOutput:
        eps = self.config.clip
        return clipped_surrogate_loss(inputs, 1.0 - eps, 1.0 + eps, self.config.delta)
