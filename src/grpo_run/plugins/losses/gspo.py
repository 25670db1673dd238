"""GSPO: clipping on a sequence-level, length-normalised importance ratio.

Zheng et al., "Group Sequence Policy Optimization", https://arxiv.org/abs/2507.18071 (the GSPO
objective and its GSPO-token variant). For completion ``i`` with masked tokens ``t``::

    s_i   = exp(mean_t (log pi(y_i,t) - log pi_old(y_i,t)))
    s_i,t = sg(s_i) * pi(y_i,t) / sg(pi(y_i,t))          # value s_i, gradient s_i * grad log pi
    loss_i,t = -min(s_i,t * A_i,t, clip(s_i,t, 1 - clip_lower, 1 + clip_higher) * A_i,t)

With ``algorithm.loss_aggregation = "seq-mean-token-mean"`` (recommended) the scalar and its
gradient are exactly the paper's sequence-level objective ``mean_i min(s_i A_i, clip(s_i) A_i)``
when the advantage is constant over each completion. The paper's clip ranges are tiny because
``s_i`` is a geometric mean: 3e-4 below and 4e-4 above.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import attrs

from grpo_run import LossInputs, LossOutput
from grpo_run.plugins.losses.common import (
    LOWER_CLIP_VALIDATOR,
    clipped_surrogate,
    masked_log_ratio,
    ratio_metrics,
    zero_off_mask,
)

if TYPE_CHECKING:  # functions import torch when they run: `grpo-run check` loads this module without it
    import torch

MAX_SEQ_LOG_RATIO = 20.0
"""``log s_i`` is clamped to ``[-20, 20]`` before ``exp`` (only the detached value; far beyond
any clip bound, so it changes nothing but an overflow into inf/NaN)."""


@attrs.frozen
class GspoConfig:
    """Options of the ``gspo`` loss."""

    clip_lower: float = attrs.field(default=3e-4, validator=LOWER_CLIP_VALIDATOR)
    """The sequence ratio is clipped below at ``1 - clip_lower`` (in ``[0, 1)``; paper: 3e-4)."""
    clip_higher: float = attrs.field(default=4e-4, validator=attrs.validators.ge(0.0))
    """The sequence ratio is clipped above at ``1 + clip_higher`` (``>= 0``; paper: 4e-4)."""


class GspoLoss:
    """GSPO-token: the sequence ratio ``s_i`` broadcast to its tokens, clipped per sequence.

    Every token of a completion shares its sequence's ratio and clip state; ``clip_frac_low`` /
    ``clip_frac_high`` and the ratio statistics are over tokens (so long completions weigh more),
    as the paper reports clipped-token fractions.
    """

    name: ClassVar[str] = "gspo"
    Config: ClassVar[type] = GspoConfig

    def __init__(self, config: GspoConfig | None = None) -> None:
        self.config = config if config is not None else GspoConfig()

    def __call__(self, inputs: LossInputs) -> LossOutput:
        import torch
        mask = inputs.mask  # bool [R, L]
        log_ratio = masked_log_ratio(inputs)  # [R, L] with grad, 0 off the mask
        seq_log_ratio = self._sequence_log_ratio(log_ratio.detach(), inputs)  # [R, L], no grad
        # Value exp(seq_log_ratio) exactly (the second factor is exp(0) = 1); gradient s_i * d log pi.
        ratio = torch.exp(seq_log_ratio) * torch.exp(log_ratio - log_ratio.detach())  # [R, L]
        low, high = 1.0 - self.config.clip_lower, 1.0 + self.config.clip_higher
        loss, silenced = clipped_surrogate(ratio, inputs.advantages, low, high)
        return LossOutput(per_token_loss=zero_off_mask(loss, mask), metrics=ratio_metrics(ratio, mask, silenced))

    @staticmethod
    def _sequence_log_ratio(log_ratio: torch.Tensor, inputs: LossInputs) -> torch.Tensor:
        """Mean masked log-ratio of each token's sequence, broadcast back to ``[R, L]``."""
        import torch
        mask = inputs.mask
        flat_ids = torch.where(mask, inputs.seq_ids, torch.zeros_like(inputs.seq_ids)).reshape(-1)  # [R*L]
        seq_sum = log_ratio.new_zeros(inputs.num_seqs).index_add(0, flat_ids, log_ratio.reshape(-1))  # [S]
        seq_len = log_ratio.new_zeros(inputs.num_seqs).index_add(0, flat_ids, mask.reshape(-1).to(log_ratio.dtype))
        seq_mean = (seq_sum / seq_len.clamp(min=1)).clamp(-MAX_SEQ_LOG_RATIO, MAX_SEQ_LOG_RATIO)  # [S]
        return seq_mean[flat_ids].reshape(mask.shape)
