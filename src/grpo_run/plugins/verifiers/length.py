"""The ``length`` verifier: length shaping -- a reward for hitting a target length, a penalty for
running long, or both (the score is their sum).

Let ``L`` be the completion's length in ``unit`` (tokens or characters).

**Target** (``target > 0``): the reward peaks at 1 when ``L == target`` and decays with the
distance ``d = |L - target|`` on the scale ``s = tolerance`` (``target`` when 0):

* ``decay = "linear"``: ``max(0, 1 - d / s)`` -- 0 from ``d >= s`` on;
* ``decay = "gaussian"``: ``exp(-(d / s)^2 / 2)`` -- soft, never exactly 0.

**Over-long penalty** (``max_length > 0``): DAPO's soft over-long punishment
(https://arxiv.org/abs/2503.14476, eq. 13) with ``Lmax = max_length`` and
``Lcache = overlong_buffer``, scaled by ``overlong_penalty``:

* ``L <= Lmax - Lcache``: 0;
* ``Lmax - Lcache < L <= Lmax``: ``((Lmax - Lcache) - L) / Lcache`` -- linear from 0 to -1;
* ``L > Lmax``: -1.

So the score lies in ``[-overlong_penalty, 1]`` with both parts on, ``[0, 1]`` with only the
target and ``[-overlong_penalty, 0]`` with only the penalty (the config's ``score_range``); the
row's reward gains ``weight x score``. Token counts come from the scorer (row key
``num_tokens``; the training loop passes them); ``unit = "chars"`` needs nothing extra.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import attrs
from attrs import validators as v

from grpo_run import NUM_TOKENS_KEY, ShapingVerifierConfig


def _buffer_within_max_length(inst: Any, _attribute: attrs.Attribute, value: int) -> None:
    if value > inst.max_length:
        raise ValueError(f"must be <= max_length ({inst.max_length}), got {value}")


@attrs.frozen
class LengthVerifierConfig(ShapingVerifierConfig):
    """Options of the ``length`` verifier (plus ``weight``, ``mode``, ``gate_fail_reward``, ``all_rows``).
    At least one of ``target`` and ``max_length`` must be set."""

    unit: Literal["tokens", "chars"] = "tokens"
    """What ``L`` counts: completion tokens (as generated) or characters of the text."""
    target: int = attrs.field(default=0, validator=v.ge(0))
    """Length that earns the full target reward; 0 turns the target reward off."""
    tolerance: int = attrs.field(default=0, validator=v.ge(0))
    """Decay scale ``s`` of the target reward (distance at which the linear reward reaches 0);
    0 means ``target``."""
    decay: Literal["linear", "gaussian"] = "linear"
    """Shape of the target reward around its peak."""
    max_length: int = attrs.field(default=0, validator=v.ge(0))
    """``Lmax`` of the over-long penalty; 0 turns the penalty off."""
    overlong_buffer: int = attrs.field(default=0, validator=[v.ge(0), _buffer_within_max_length])
    """``Lcache``: the penalty ramps over the last this-many units before ``max_length``; 0 makes it
    a step at ``max_length``."""
    overlong_penalty: float = attrs.field(default=1.0, validator=[v.gt(0.0), v.lt(math.inf)])
    """Size of the full penalty (the score reaches ``-overlong_penalty``)."""

    def __attrs_post_init__(self) -> None:
        if self.target == 0 and self.max_length == 0:
            raise ValueError("length: set target (a target-length reward) and/or max_length (an over-long penalty)")

    @property
    def score_range(self) -> tuple[float, float]:
        """``[-overlong_penalty or 0, 1 or 0]`` depending on which parts are on."""
        return (-self.overlong_penalty if self.max_length else 0.0, 1.0 if self.target else 0.0)


class LengthVerifier:
    """Target-length reward plus DAPO's soft over-long penalty (see the module docs)."""

    name: ClassVar[str] = "length"
    Config: ClassVar[type] = LengthVerifierConfig

    def __init__(self, config: LengthVerifierConfig) -> None:
        self.config = config

    def score(self, completion: str, ground_truth: Any, row: Mapping[str, Any]) -> float:
        """The length score of ``completion`` (``ground_truth`` is not used)."""
        length = self._length(completion, row)
        return target_reward(length, self.config) + overlong_penalty(length, self.config)

    def _length(self, completion: str, row: Mapping[str, Any]) -> int:
        if self.config.unit == "chars":
            return len(completion)
        count = row.get(NUM_TOKENS_KEY)
        if isinstance(count, bool) or not isinstance(count, int):
            raise ValueError(
                f"unit = 'tokens' needs the completion's token count in row[{NUM_TOKENS_KEY!r}] "
                f"(got {count!r}); the training loop passes it, or set unit = 'chars'"
            )
        return count


def target_reward(length: int, config: LengthVerifierConfig) -> float:
    """1 at ``target``, decaying with the distance from it; 0 when the target is off."""
    if config.target == 0:
        return 0.0
    distance = abs(length - config.target) / (config.tolerance or config.target)
    if config.decay == "linear":
        return max(0.0, 1.0 - distance)
    return math.exp(-0.5 * distance * distance)


def overlong_penalty(length: int, config: LengthVerifierConfig) -> float:
    """DAPO's soft over-long punishment times ``overlong_penalty``; 0 when the penalty is off."""
    if config.max_length == 0:
        return 0.0
    soft_start = config.max_length - config.overlong_buffer
    if length <= soft_start:
        return 0.0
    if length > config.max_length:
        return -config.overlong_penalty
    return config.overlong_penalty * (soft_start - length) / config.overlong_buffer
