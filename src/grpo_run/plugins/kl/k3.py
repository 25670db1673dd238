"""Schulman's ``k3`` estimator of KL(pi || pi_ref): unbiased, non-negative, low variance.

J. Schulman, "Approximating KL Divergence", http://joschu.net/blog/kl-approx.html. With tokens
sampled from pi and ``r = pi_ref / pi = exp(-d)``, ``d = log pi - log pi_ref``:
``k3 = (r - 1) - log r = exp(-d) - 1 + d >= 0``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import attrs

if TYPE_CHECKING:  # functions import torch when they run: `grpo-run check` loads this module without it
    import torch


@attrs.frozen
class K3Config:
    """Options of the ``k3`` KL estimator."""

    clamp: float = attrs.field(default=20.0, validator=attrs.validators.gt(0.0))
    """``d = logprobs - ref_logprobs`` is clamped to ``[-clamp, clamp]`` before ``exp(-d)`` so a
    token the reference finds far likelier cannot overflow (``exp(20) ~ 4.9e8``)."""


class K3KL:
    """Per-token ``exp(-d) - 1 + d`` with ``d = clamp(logprobs - ref_logprobs)``."""

    name: ClassVar[str] = "k3"
    Config: ClassVar[type] = K3Config

    def __init__(self, config: K3Config | None = None) -> None:
        self.config = config if config is not None else K3Config()

    def __call__(self, logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
        """``logprobs`` (with grad), ``ref_logprobs``: ``[R, L]`` -> per-token KL ``[R, L]``."""
        import torch
        d = (logprobs - ref_logprobs).clamp(-self.config.clamp, self.config.clamp)
        return torch.exp(-d) - 1.0 + d
