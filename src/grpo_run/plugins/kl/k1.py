"""Schulman's ``k1`` estimator of KL(pi || pi_ref): the plain log-ratio.

J. Schulman, "Approximating KL Divergence", http://joschu.net/blog/kl-approx.html. With tokens
sampled from pi and ``d = log pi - log pi_ref``, ``k1 = d`` is unbiased for the KL but has high
variance and is negative on about half the tokens. As a loss term its gradient is
``grad log pi``, whose expectation under pi is zero: it regularises little when minimised
directly (it is the usual choice for a KL *reward* penalty instead).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import attrs

if TYPE_CHECKING:  # functions import torch when they run: `grpo-run check` loads this module without it
    import torch


@attrs.frozen
class K1Config:
    """Options of the ``k1`` KL estimator."""

    clamp: float = attrs.field(default=20.0, validator=attrs.validators.gt(0.0))
    """``d = logprobs - ref_logprobs`` is clamped to ``[-clamp, clamp]`` (zero gradient beyond)."""


class K1KL:
    """Per-token ``d`` with ``d = clamp(logprobs - ref_logprobs)``."""

    name: ClassVar[str] = "k1"
    Config: ClassVar[type] = K1Config

    def __init__(self, config: K1Config | None = None) -> None:
        self.config = config if config is not None else K1Config()

    def __call__(self, logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
        """``logprobs`` (with grad), ``ref_logprobs``: ``[R, L]`` -> per-token KL ``[R, L]``."""
        return (logprobs - ref_logprobs).clamp(-self.config.clamp, self.config.clamp)
