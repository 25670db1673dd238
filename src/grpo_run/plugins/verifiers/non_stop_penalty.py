"""The ``non_stop_penalty`` verifier: penalise completions that did not finish by themselves.

A completion whose finish reason is not ``"stop"`` (usually ``"length"``: it hit the token limit
and was cut off) scores -1, one that stopped scores 0; the score range is ``[-1, 0]``.

* ``mode = "additive"`` (default): the row's reward gains ``weight x score``, i.e. ``-weight``
  for a cut-off completion -- a penalty on top of whatever the answer earned.
* ``mode = "gate"``: a cut-off completion's whole reward becomes ``gate_fail_reward`` (default
  0.0, as Open Instruct's ``non_stop_penalty_value``); a stopped one keeps its reward.

The finish reason comes from the scorer (row key ``finish_reason``; the training loop passes
it). A row without one is a failed call (counted and logged), never a silent zero.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import attrs

from grpo_run import FINISH_REASON_KEY, ShapingVerifierConfig


@attrs.frozen
class NonStopPenaltyConfig(ShapingVerifierConfig):
    """Options of ``non_stop_penalty``: ``weight`` (the penalty size when additive), ``mode``,
    ``gate_fail_reward`` and ``all_rows``."""


class NonStopPenaltyVerifier:
    """-1 when the completion's finish reason is not ``"stop"``, else 0."""

    name: ClassVar[str] = "non_stop_penalty"
    Config: ClassVar[type] = NonStopPenaltyConfig
    score_range: ClassVar[tuple[float, float]] = (-1.0, 0.0)

    def __init__(self, config: NonStopPenaltyConfig | None = None) -> None:
        self.config = config if config is not None else NonStopPenaltyConfig()

    def score(self, completion: str, ground_truth: Any, row: Mapping[str, Any]) -> float:
        reason = row.get(FINISH_REASON_KEY)
        if not isinstance(reason, str):
            raise ValueError(
                f"needs the completion's finish reason in row[{FINISH_REASON_KEY!r}] (got {reason!r}); "
                "pass finish_reasons to the scorer, or a finish_reason field in scored rows"
            )
        return 0.0 if reason == "stop" else -1.0
