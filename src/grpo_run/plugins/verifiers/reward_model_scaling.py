"""From a reward model's raw score to the verifier's score: the ``transform`` and the ``clip``.

* ``"none"``: the raw score (the logit of the one-label head), as TRL uses it.
* ``"sigmoid"``: ``1 / (1 + exp(-raw))``, in ``(0, 1)``: the probability a Bradley-Terry reward
  model gives the completion of beating one scored 0.
* ``"standardize"``: ``(raw - mean) / (std + 1e-8)`` over every raw score of the run's training
  calls so far, this call's included (running moments, merged per call with Chan et al.'s
  parallel formula, population deviation). Evaluations are standardised the same way but leave
  the moments as they were. The moments are this rescaler's state, saved in checkpoints.

``clip = [low, high]`` then clamps the score into that interval.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

EPS = 1e-8
"""Added to the standard deviation before dividing (one score, or equal scores, give 0)."""


@attrs.frozen
class Moments:
    """Count, mean and sum of squared deviations of every raw score seen (float64)."""

    count: int = 0
    mean: float = 0.0
    m2: float = 0.0

    @property
    def std(self) -> float:
        return math.sqrt(self.m2 / self.count) if self.count else 0.0

    def merged(self, values: Sequence[float]) -> Moments:
        """These moments with ``values`` added (Chan, Golub and LeVeque's pairwise combination)."""
        n = len(values)
        if n == 0:
            return self
        mean = sum(values) / n
        m2 = sum((v - mean) ** 2 for v in values)
        total = self.count + n
        delta = mean - self.mean
        return Moments(total, self.mean + delta * n / total, self.m2 + m2 + delta * delta * self.count * n / total)


def sigmoid(x: float) -> float:
    """The logistic function, without overflow for large ``|x|``."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


class RewardRescaler:
    """A :class:`~grpo_run.ScoreRescaler` for the ``reward_model`` verifier's ``transform`` and ``clip``."""

    def __init__(self, transform: str, clip: tuple[float, float] | None) -> None:
        if transform not in ("none", "sigmoid", "standardize"):
            raise ValueError(f"unknown transform {transform!r}")
        self.transform = transform
        self.clip = clip
        self.moments = Moments()

    def rescale(self, raw: Sequence[float], training: bool) -> list[float]:
        if self.transform == "sigmoid":
            scores = [sigmoid(x) for x in raw]
        elif self.transform == "standardize":
            moments = self.moments.merged(list(raw))
            if training:
                self.moments = moments
            scores = [(x - moments.mean) / (moments.std + EPS) for x in raw]
        else:
            scores = list(raw)
        if self.clip is not None:
            low, high = self.clip
            scores = [min(max(s, low), high) for s in scores]
        return scores

    def state_dict(self) -> dict[str, Any]:
        return {"count": self.moments.count, "mean": self.moments.mean, "m2": self.moments.m2}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.moments = Moments(int(state["count"]), float(state["mean"]), float(state["m2"]))
