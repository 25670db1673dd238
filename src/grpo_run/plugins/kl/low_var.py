"""``low_var``: Schulman's ``k3`` with its value clamped, as verl's ``low_var_kl``.

The ``k3`` estimator (``exp(-d) - 1 + d``, ``d = log pi - log pi_ref``; J. Schulman,
"Approximating KL Divergence", http://joschu.net/blog/kl-approx.html) grows like ``exp(-d)`` on
tokens the reference finds far likelier than the policy. verl's ``low_var_kl`` (``kl_penalty``
in ``verl/trainer/ppo/core_algos.py``) clamps ``d`` to ``[-20, 20]`` and then the estimate to
``[-10, 10]``; such outlier tokens then stop contributing a gradient instead of dominating the
KL term. Below the value clamp it is exactly ``k3``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import attrs

if TYPE_CHECKING:  # functions import torch when they run: `grpo-run check` loads this module without it
    import torch


@attrs.frozen
class LowVarConfig:
    """Options of the ``low_var`` KL estimator."""

    clamp: float = attrs.field(default=20.0, validator=attrs.validators.gt(0.0))
    """``d = logprobs - ref_logprobs`` is clamped to ``[-clamp, clamp]`` before ``exp(-d)``."""
    value_clamp: float = attrs.field(default=10.0, validator=attrs.validators.gt(0.0))
    """The per-token ``k3`` value is clamped to ``[-value_clamp, value_clamp]`` (zero gradient beyond)."""


class LowVarKL:
    """Per-token ``clamp(exp(-d) - 1 + d, -value_clamp, value_clamp)``, ``d = clamp(logprobs - ref_logprobs)``."""

    name: ClassVar[str] = "low_var"
    Config: ClassVar[type] = LowVarConfig

    def __init__(self, config: LowVarConfig | None = None) -> None:
        self.config = config if config is not None else LowVarConfig()

    def __call__(self, logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
        """``logprobs`` (with grad), ``ref_logprobs``: ``[R, L]`` -> per-token KL ``[R, L]``."""
        import torch
        d = (logprobs - ref_logprobs).clamp(-self.config.clamp, self.config.clamp)
        k3 = torch.exp(-d) - 1.0 + d
        return k3.clamp(-self.config.value_clamp, self.config.value_clamp)
