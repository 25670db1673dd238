"""Dr. GRPO: GRPO's clipped surrogate without the length and difficulty biases.

Liu et al., "Understanding R1-Zero-Like Training: A Critical Perspective",
https://arxiv.org/abs/2503.20783 (section 3.1). The per-token surrogate is GRPO's; the paper's
fix lives in two engine settings, which this loss requires (its config check names them):

* no per-sequence length normalisation: sum each completion's token terms and divide by a
  *constant* (the generation budget) -- ``algorithm.loss_denominator`` set to a number such as
  ``rollout.response_length``;
* no division by the group's reward std -- ``algorithm.advantage_normalization_type = "centered"``.
"""

from __future__ import annotations

from typing import ClassVar

import attrs

from grpo_run import ConfigIssue, RunConfig
from grpo_run.plugins.losses.grpo import GrpoConfig, GrpoLoss


@attrs.frozen
class DrGrpoConfig(GrpoConfig):
    """Options of the ``dr_grpo`` loss (those of ``grpo``: ``clip``, ``delta``).

    Selecting ``dr_grpo`` without its two ``[algorithm]`` settings would silently train plain
    GRPO, so :meth:`check_run` rejects such a config and says which keys to set.
    """

    def check_run(self, run: RunConfig) -> list[ConfigIssue]:
        """Dr. GRPO needs centered advantages and a constant loss denominator."""
        alg = run.algorithm
        missing = []
        if alg.advantage_normalization_type != "centered":
            missing.append('algorithm.advantage_normalization_type = "centered" (no division by the group std)')
        if alg.loss_denominator == "token":
            missing.append(
                f"algorithm.loss_denominator = {run.rollout.response_length} (a constant such as "
                "rollout.response_length, not a per-sequence token count)"
            )
        if not missing:
            return []
        return [
            ConfigIssue(
                "loss.name",
                'is "dr_grpo", which needs ' + " and ".join(missing)
                + '; without them it trains plain GRPO (use name = "grpo" for that)',
            )
        ]


class DrGrpoLoss(GrpoLoss):
    """GRPO's per-token ``-min(ratio * A, clip(ratio, 1 - clip, 1 + clip) * A)``, 0 off the mask.

    Meant for centered advantages and a constant ``algorithm.loss_denominator`` (module docstring).
    """

    name: ClassVar[str] = "dr_grpo"
    Config: ClassVar[type] = DrGrpoConfig
