"""What scoring returns: one :class:`ScoredCompletion` per completion, in a :class:`ScoredBatch`
that also carries the statistics of exactly those calls."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from grpo_run.core.plugins.types import is_solved
from grpo_run.core.scoring.metrics import ScoringMetrics


@attrs.frozen
class ScoredCompletion:
    """The reward of one completion."""

    reward: float
    """``verification_reward x sum(weight x score)`` over the applicable additive verifiers the
    row gets, or the ``gate_fail_reward`` of a gate it failed."""
    max_reward: float
    """``verification_reward x sum(weight x top of score range)`` over the same additive verifiers."""
    scores: Mapping[str, float]
    """Unweighted score of each applicable verifier, gates included (0 for a failed call)."""
    error: str | None = None
    """Why some verifier gave no real score (timeout, exception, not enabled); None when all did."""
    gated: bool = False
    """A gate failed, so ``reward`` is its ``gate_fail_reward``."""
    solved: bool = attrs.field(
        default=attrs.Factory(lambda self: is_solved(self.reward, self.max_reward), takes_self=True))
    """The row's correctness verifiers said right (:mod:`~grpo_run.core.scoring.correctness`);
    unset: the reward reached its maximum (:func:`grpo_run.is_solved`)."""


class ScoredBatch(Sequence[ScoredCompletion]):
    """What one :meth:`RewardScorer.score` call returns: the results, in order, and the
    statistics of exactly these calls (``metrics()`` reports them as step metrics; ``stats`` can
    be merged with other calls' into one step's)."""

    __slots__ = ("results", "stats")

    def __init__(self, results: list[ScoredCompletion], stats: ScoringMetrics) -> None:
        self.results = results
        self.stats = stats

    def __getitem__(self, index):  # type: ignore[override]
        return self.results[index]

    def __len__(self) -> int:
        return len(self.results)

    def metrics(self) -> dict[str, float]:
        """``verifier/<name>/...`` and ``scoring/...`` metrics of this call (see :class:`ScoringMetrics`)."""
        return self.stats.report()
