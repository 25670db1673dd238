"""CISPO: REINFORCE weighted by a clipped, detached importance-sampling ratio.

MiniMax et al., "MiniMax-M1: Scaling Test-Time Compute Efficiently with Lightning Attention",
https://arxiv.org/abs/2506.13585 (section 3.1, CISPO). Unlike PPO's clip, truncating the
*weight* never drops a token's gradient, so rare "fork" tokens keep learning. The paper
normalises by the total number of tokens in the batch: ``algorithm.loss_aggregation =
"token-mean"``. It leaves the lower bound off and tunes only the upper one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import attrs

from grpo_run import LossInputs, LossOutput
from grpo_run.plugins.losses.common import masked_log_ratio, ratio_metrics, zero_off_mask

if TYPE_CHECKING:  # functions import torch when they run: `grpo-run check` loads this module without it
    import torch


@attrs.frozen
class CispoConfig:
    """Options of the ``cispo`` loss."""

    clip_higher: float = attrs.field(default=5.0, validator=attrs.validators.ge(0.0))
    """epsilon_high^IS: the importance weight is truncated at ``1 + clip_higher`` (``>= 0``). The
    paper does not publish its value; 5.0 is a loose cap used by open CISPO recipes."""
    clip_lower: float | None = attrs.field(
        default=None,
        validator=attrs.validators.optional([attrs.validators.ge(0.0), attrs.validators.lt(1.0)]),
    )
    """epsilon_low^IS: when set (in ``[0, 1)``), the weight is raised to at least ``1 - clip_lower``;
    ``None`` (the default, as in the paper) means no lower bound."""


class CispoLoss:
    """Per-token ``-sg(clip(ratio, 1 - clip_lower, 1 + clip_higher)) * A * logprobs``, 0 off the mask.

    ``ratio = exp(logprobs - old_logprobs)``; ``sg`` is stop-gradient, so the gradient is
    ``-w * A * grad(log pi)`` on every token. The value carries ``logprobs`` and so is not
    comparable with the ratio-based losses. ``clip_frac_high``/``clip_frac_low`` count tokens
    whose weight was truncated (whatever the advantage's sign).
    """

    name: ClassVar[str] = "cispo"
    Config: ClassVar[type] = CispoConfig

    def __init__(self, config: CispoConfig | None = None) -> None:
        self.config = config if config is not None else CispoConfig()

    def __call__(self, inputs: LossInputs) -> LossOutput:
        import torch
        mask = inputs.mask  # bool [R, L]
        ratio = torch.exp(masked_log_ratio(inputs))  # [R, L], 1 off the mask
        high = 1.0 + self.config.clip_higher
        low = None if self.config.clip_lower is None else 1.0 - self.config.clip_lower
        weight = torch.clamp(ratio.detach(), min=low, max=high)  # [R, L], no grad
        logprobs = zero_off_mask(inputs.logprobs, mask)  # garbage off the mask stays out of the graph
        loss = -weight * inputs.advantages * logprobs
        clip_low = ratio < low if low is not None else torch.zeros_like(mask)
        metrics = ratio_metrics(ratio, mask, {"low": clip_low, "high": ratio > high})
        return LossOutput(per_token_loss=zero_off_mask(loss, mask), metrics=metrics)
