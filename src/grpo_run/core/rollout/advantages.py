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

    A group whose rewards are all equal gets all-zero advantages either way.
    """
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be [num_groups, G], got shape {tuple(rewards.shape)}")
    r = rewards if rewards.is_floating_point() else rewards.float()
    centered = r - r.mean(dim=1, keepdim=True)
    if kind == "centered":
        return centered
    if kind != "standard":
        raise ValueError(f"unknown advantage kind {kind!r}; expected 'standard' or 'centered'")
    if std == "sample":
        if r.shape[1] < 2:
            raise ValueError("standard advantages with the sample std need at least 2 samples per group")
        return centered / (r.std(dim=1, keepdim=True) + eps)
    if std == "population":
        return centered / (r.std(dim=1, keepdim=True, correction=0) + eps)
    raise ValueError(f"unknown std kind {std!r}; expected 'sample' or 'population'")


def nonzero_std_mask(rewards: torch.Tensor) -> torch.Tensor:
    """bool ``[num_groups]``: true for groups whose rewards are not all equal.

    Exact comparison (the std of equal floats is exactly 0), so a group kept here never has
    ``std == 0``; groups that are false carry no learning signal under GRPO.
    """
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be [num_groups, G], got shape {tuple(rewards.shape)}")
    return (rewards != rewards[:, :1]).any(dim=1)
