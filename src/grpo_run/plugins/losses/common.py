"""Pieces shared by the built-in losses: the masked log-ratio, the PPO clip and the ratio metrics,
and the whole clipped-surrogate loss that ``grpo``, ``dr_grpo`` and ``dapo`` differ from only in
their clip bounds.

Every helper takes ``[rows, length]`` tensors and a bool ``mask`` of the same shape; positions
off the mask may hold anything (padding, prompt tokens) and never reach a value or a gradient.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from grpo_run import LossInputs, LossOutput

if TYPE_CHECKING:  # functions import torch when they run: `grpo-run check` loads this module without it
    import torch

DELTA_VALIDATOR = attrs.validators.optional(attrs.validators.gt(1.0))
"""``delta`` (dual clip) is off (``None``) or a bound above 1."""
LOWER_CLIP_VALIDATOR = [attrs.validators.ge(0.0), attrs.validators.lt(1.0)]
"""A lower clip epsilon is in ``[0, 1)``: the ratio's lower bound ``1 - eps`` stays positive."""


def masked_log_ratio(inputs: LossInputs) -> torch.Tensor:
    """``log pi - log pi_old`` on the mask, exactly 0 elsewhere (``[R, L]``, with grad).

    Zeroing happens *before* any ``exp``: padding may hold anything, and an inf there would turn
    into NaN gradients through a later ``where``.
    """
    import torch
    diff = inputs.logprobs - inputs.old_logprobs
    return torch.where(inputs.mask, diff, torch.zeros_like(diff))


def clipped_surrogate(
    ratio: torch.Tensor, adv: torch.Tensor, low: float, high: float, delta: float | None = None
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO's pessimistic surrogate per token, as a loss (not masked; the caller masks).

    ``loss = -min(ratio * A, clip(ratio, low, high) * A)``; with ``delta`` (dual clip, Ye et al.
    2020, arXiv 1912.09729) a negative-advantage token's loss is further capped at ``-delta * A``,
    so a ratio above ``delta`` stops pushing it down. Returns the loss ``[R, L]`` and bool masks
    (not yet intersected with the loss mask) of the tokens each bound silenced:
    ``low`` (A < 0, ratio < low), ``high`` (A > 0, ratio > high), ``dual`` (A < 0, ratio > delta).
    """
    import torch
    unclipped = ratio * adv  # [R, L]
    clipped = torch.clamp(ratio, low, high) * adv  # [R, L]
    objective = torch.minimum(unclipped, clipped)
    with torch.no_grad():
        silenced = {"low": (ratio < low) & (adv < 0), "high": (ratio > high) & (adv > 0)}
    if delta is not None:
        # For A < 0, min(...) = max(ratio, low) * A, which the cap delta * A overtakes once ratio > delta.
        objective = torch.where(adv < 0, torch.maximum(objective, delta * adv), objective)
        with torch.no_grad():
            silenced["dual"] = (ratio > delta) & (adv < 0)
    return -objective, silenced


def ratio_metrics(
    ratio: torch.Tensor, mask: torch.Tensor, silenced: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """Detached scalars over the masked tokens: ``clip_frac_<key>`` for each bool ``[R, L]`` flag
    tensor in ``silenced`` (``low``, ``high``, ``dual``; intersected with ``mask`` here), and the
    ratio's mean and population variance (``ratio_mean``, ``ratio_var``).
    """
    import torch
    with torch.no_grad():
        r = ratio.detach()
        n = mask.sum().clamp(min=1).to(r.dtype)
        mean = torch.where(mask, r, torch.zeros_like(r)).sum() / n
        var = torch.where(mask, (r - mean) ** 2, torch.zeros_like(r)).sum() / n
        metrics = {f"clip_frac_{key}": (mask & flags).sum().to(r.dtype) / n for key, flags in silenced.items()}
        return {**metrics, "ratio_mean": mean, "ratio_var": var}


def zero_off_mask(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``values`` on the mask, exactly 0 elsewhere (by ``where``, so NaN/inf cannot leak)."""
    import torch
    return torch.where(mask, values, torch.zeros_like(values))


def clipped_surrogate_loss(inputs: LossInputs, low: float, high: float, delta: float | None) -> LossOutput:
    """The PPO-clipped surrogate loss of ``inputs``: ``ratio = exp(logprobs - old_logprobs)`` (1 off
    the mask), the per-token :func:`clipped_surrogate` with the ratio clipped to ``[low, high]`` (and
    the dual clip ``delta``), 0 off the mask, and the :func:`ratio_metrics`."""
    import torch
    mask = inputs.mask  # bool [R, L]
    ratio = torch.exp(masked_log_ratio(inputs))  # [R, L], 1 off the mask
    loss, silenced = clipped_surrogate(ratio, inputs.advantages, low, high, delta)
    return LossOutput(per_token_loss=zero_off_mask(loss, mask), metrics=ratio_metrics(ratio, mask, silenced))
