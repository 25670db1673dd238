"""Dr. GRPO: GRPO's clipped surrogate without the length and difficulty biases.

Liu et al., "Understanding R1-Zero-Like Training: A Critical Perspective",
https://arxiv.org/abs/2503.20783 (section 3.1). The per-token surrogate is GRPO's; the paper's
fix lives in two engine settings, which this loss cannot set itself:

* no per-sequence length normalisation: sum each completion's token terms and divide by a
  *constant* (the generation budget) -- ``algorithm.loss_denominator`` set to a number such as
  ``rollout.response_length``;
* no division by the group's reward std -- ``algorithm.advantage_normalization_type = "centered"``.
"""

from __future__ import annotations

from typing import ClassVar

import attrs

from grpo_run.plugins.losses.grpo import GrpoConfig, GrpoLoss


@attrs.frozen
class DrGrpoConfig(GrpoConfig):
    """Options of the ``dr_grpo`` loss (those of ``grpo``: ``clip``, ``delta``)."""


class DrGrpoLoss(GrpoLoss):
    """GRPO's per-token ``-min(ratio * A, clip(ratio, 1 - clip, 1 + clip) * A)``, 0 off the mask.

    Meant for centered advantages and a constant ``algorithm.loss_denominator`` (module docstring).
    """

    name: ClassVar[str] = "dr_grpo"
    Config: ClassVar[type] = DrGrpoConfig
