"""Schulman's ``k2`` estimator of KL(pi || pi_ref): half the squared log-ratio.

J. Schulman, "Approximating KL Divergence", http://joschu.net/blog/kl-approx.html. With
``d = log pi - log pi_ref``, ``k2 = d^2 / 2`` is non-negative and low-variance but biased (the
bias is third order in ``d``). Minimised as a loss on on-policy samples its gradient,
``d * grad log pi``, is in expectation the gradient of KL(pi || pi_ref).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import attrs

if TYPE_CHECKING:  # functions import torch when they run: `grpo-run check` loads this module without it
    import torch


@attrs.frozen
class K2Config:
    """Options of the ``k2`` KL estimator."""

    clamp: float = attrs.field(default=20.0, validator=attrs.validators.gt(0.0))
    """``d = logprobs - ref_logprobs`` is clamped to ``[-clamp, clamp]`` (zero gradient beyond)."""


class K2KL:
    """Per-token ``d^2 / 2`` with ``d = clamp(logprobs - ref_logprobs)``."""

    name: ClassVar[str] = "k2"
    Config: ClassVar[type] = K2Config

    def __init__(self, config: K2Config | None = None) -> None:
        self.config = config if config is not None else K2Config()

    def __call__(self, logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
        """``logprobs`` (with grad), ``ref_logprobs``: ``[R, L]`` -> per-token KL ``[R, L]``."""
        d = (logprobs - ref_logprobs).clamp(-self.config.clamp, self.config.clamp)
        return 0.5 * d * d
