"""Group-relative advantages (GRPO): each completion is scored against its prompt's group."""

from __future__ import annotations

from typing import Literal

import torch

AdvantageKind = Literal["standard", "centered"]
StdKind = Literal["sample", "population"]


def group_advantages(
    rewards: torch.Tensor, kind: AdvantageKind = "standard", eps: float = 1e-8, *, std: StdKind = "sample"
) -> torch.Tensor:
    """Advantages of ``rewards`` (``[num_groups, G]``, one row per prompt), same shape, float.

    * ``"standard"``: ``(r - mean) / (std + eps)``. ``std = "sample"`` is the Bessel-corrected
      standard deviation (``torch.std``'s default; verl and TRL use it); ``"population"`` divides
      by ``G`` (numpy's ``.std()``; Open Instruct uses it). The sample std needs ``G >= 2``. For
      ``G = 8`` the two differ by a factor sqrt(8/7) ~ 1.069.
    * ``"centered"``: ``r - mean`` (Dr. GRPO's choice: no per-group rescaling).

    A group without spread (:func:`groups_with_spread` is false) gets exactly 0.0 advantages
    either way: the mean of equal floats is not always that float (eight rewards of 0.1 average
    to 0.09999999999999999), so ``r - mean`` alone would leave ~1e-17 / (1e-17 + eps) ~ 1e-10.
    """
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be [num_groups, G], got shape {tuple(rewards.shape)}")
    r = rewards if rewards.is_floating_point() else rewards.float()
    centered = r - r.mean(dim=1, keepdim=True)
    if kind == "centered":
        advantages = centered
    elif kind != "standard":
        raise ValueError(f"unknown advantage kind {kind!r}; expected 'standard' or 'centered'")
    elif std == "sample":
        if r.shape[1] < 2:
            raise ValueError("standard advantages with the sample std need at least 2 samples per group")
        advantages = centered / (r.std(dim=1, keepdim=True) + eps)
    elif std == "population":
        advantages = centered / (r.std(dim=1, keepdim=True, correction=0) + eps)
    else:
        raise ValueError(f"unknown std kind {std!r}; expected 'sample' or 'population'")
    return torch.where(groups_with_spread(r)[:, None], advantages, torch.zeros_like(advantages))


def turn_advantages(
    totals: list[float], returns: list[list[float]], kind: AdvantageKind = "standard", eps: float = 1e-8,
    *, std: StdKind = "sample",
) -> list[list[float]]:
    """Per-turn advantages of one group (``advantage_granularity = "turn"``).

    ``totals``: each episode's reward ``G_0``; ``returns``: each episode's return-to-go per turn
    (``returns[i][0] == totals[i]``). Turn ``t`` of episode ``i`` gets ``(G_it - mean(G_0)) /
    (std(G_0) + eps)`` (``"centered"``: no division): the baseline and scale are the group's
    trajectory statistics, so turn 0 gets exactly the trajectory advantage, and a later turn less
    the more reward came before it. A group without spread in ``G_0`` gets zeros, as in
    :func:`group_advantages`.
    """
    r = torch.tensor([totals], dtype=torch.float64)
    if not bool(groups_with_spread(r)[0]):
        return [[0.0] * len(g) for g in returns]
    mean = r.mean()
    if kind == "centered":
        scale = 1.0
    elif kind == "standard":
        scale = float(r.std(correction=1 if std == "sample" else 0)) + eps
    else:
        raise ValueError(f"unknown advantage kind {kind!r}; expected 'standard' or 'centered'")
    return [[(g - float(mean)) / scale for g in episode] for episode in returns]


SPREAD_ATOL = 1e-12
SPREAD_RTOL = 1e-9


def groups_with_spread(rewards: torch.Tensor) -> torch.Tensor:
    """bool ``[num_groups]``: whether each group's rewards (``[num_groups, G]``) have a spread.

    The one definition of "no spread" (docs/algorithms.md): ``max - min <= SPREAD_ATOL +
    SPREAD_RTOL * max(|max|, |min|)``, i.e. the rewards are equal up to float rounding (weights
    0.1 + 0.2 on one completion and 0.3 on another give 0.30000000000000004 and 0.3: no spread).
    Such a group gets exactly zero advantages (:func:`group_advantages`), is dropped from training
    by ``algorithm.filter_zero_std_samples`` and is replaced by active sampling's refill.
    """
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be [num_groups, G], got shape {tuple(rewards.shape)}")
    r = rewards if rewards.is_floating_point() else rewards.double()
    high, low = r.amax(dim=1), r.amin(dim=1)  # not max(dim): with indices it runs an OpenMP region
    return (high - low) > SPREAD_ATOL + SPREAD_RTOL * torch.maximum(high.abs(), low.abs())
