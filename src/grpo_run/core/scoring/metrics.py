"""Per-verifier statistics of the scoring runtime, reported under ``verifier/<name>/...``, and the
error-rate guard that stops a run whose verifier keeps failing."""

from __future__ import annotations

import math
from collections import defaultdict, deque
from collections.abc import Mapping
from typing import Any

import attrs

from grpo_run.core.errors import RunError
from grpo_run.core.plugins.types import reaches
from grpo_run.core.scoring.workers import CallOutcome

STANDARD_KEYS = (
    "calls",
    "count",
    "mean_score",
    "correct_rate",
    "latency_p50_ms",
    "latency_p95_ms",
    "errors",
    "timeouts",
)
"""Keys every verifier that had calls reports; verifier-specific metrics cannot override them."""


@attrs.define
class VerifierStats:
    """Running totals for one verifier since the last :meth:`ScoringMetrics.pop`."""

    calls: int = 0
    """Every call, applicable or not, failed or not."""
    scores: list[float] = attrs.field(factory=list)
    """Scores of applicable calls (failed calls count as 0)."""
    latencies_s: list[float] = attrs.field(factory=list)
    """Latency of every call that returned (timeouts excluded)."""
    errors: int = 0
    """Calls that raised, returned a bad value or died (timeouts excluded)."""
    timeouts: int = 0
    extra: dict[str, list[float]] = attrs.field(factory=lambda: defaultdict(list))
    """Verifier-specific metrics (``VerifierResult.metrics``), averaged on pop."""

    def add(self, outcome: CallOutcome) -> None:
        self.calls += 1
        if outcome.timed_out:
            self.timeouts += 1
        else:
            self.latencies_s.append(outcome.latency_s)
            if outcome.error is not None:
                self.errors += 1
        if outcome.applicable:
            self.scores.append(outcome.score)
        for key, value in outcome.metrics.items():
            self.extra[key].append(value)


class ScoringMetrics:
    """Accumulates call outcomes per verifier and reports them as flat step metrics.

    One instance per scoring call (:class:`~grpo_run.core.scoring.scorer.ScoredBatch.stats`);
    :meth:`merge` adds another call's, so a step's metrics are exactly its own calls'.

    :param score_tops: the top of each verifier's declared score range: ``correct_rate`` is the
        share of applicable scores that reach it (1.0 for a verifier not listed).
    """

    def __init__(self, score_tops: Mapping[str, float] | None = None) -> None:
        self._tops = dict(score_tops or {})
        self._stats: dict[str, VerifierStats] = {}
        self._row_errors = 0
        self._rows = 0
        self._gated = 0

    def add(self, verifier: str, outcome: CallOutcome) -> None:
        self._stats.setdefault(verifier, VerifierStats()).add(outcome)

    def add_rows(self, rows: int, gated: int) -> None:
        """``rows`` rows scored, ``gated`` of them given a failed gate's reward."""
        self._rows += rows
        self._gated += gated

    def add_row_error(self) -> None:
        """A row that could not be fully dispatched (e.g. it names a verifier not enabled)."""
        self._row_errors += 1

    def merge(self, other: ScoringMetrics) -> ScoringMetrics:
        """Add ``other``'s counts to these; returns self."""
        self._tops.update(other._tops)
        for name, theirs in other._stats.items():
            mine = self._stats.setdefault(name, VerifierStats())
            mine.calls += theirs.calls
            mine.scores += theirs.scores
            mine.latencies_s += theirs.latencies_s
            mine.errors += theirs.errors
            mine.timeouts += theirs.timeouts
            for key, values in theirs.extra.items():
                mine.extra[key] += values
        self._row_errors += other._row_errors
        self._rows += other._rows
        self._gated += other._gated
        return self

    def report(self) -> dict[str, float]:
        """The metrics of everything added. Only verifiers that had calls report; a mean
        with nothing to average (no applicable call, no call that returned) is left out, not NaN.
        ``calls`` counts every call, ``count`` the applicable ones (those in ``mean_score``);
        ``correct_rate`` is the share of applicable scores at the top of the verifier's score
        range. ``scoring/gated_fraction`` is the share of rows whose reward a failed gate replaced
        (only when rows were scored)."""
        metrics: dict[str, float] = {}
        for name, stats in sorted(self._stats.items()):
            prefix = f"verifier/{name}/"
            for key, values in stats.extra.items():
                if key not in STANDARD_KEYS and values:
                    metrics[prefix + key] = sum(values) / len(values)
            scores = stats.scores
            latencies_ms = sorted(1000.0 * s for s in stats.latencies_s)
            metrics[prefix + "calls"] = float(stats.calls)
            metrics[prefix + "count"] = float(len(scores))
            if scores:
                top = self._tops.get(name, 1.0)
                metrics[prefix + "mean_score"] = sum(scores) / len(scores)
                metrics[prefix + "correct_rate"] = sum(reaches(s, top) for s in scores) / len(scores)
            if latencies_ms:
                metrics[prefix + "latency_p50_ms"] = percentile(latencies_ms, 50.0)
                metrics[prefix + "latency_p95_ms"] = percentile(latencies_ms, 95.0)
            metrics[prefix + "errors"] = float(stats.errors)
            metrics[prefix + "timeouts"] = float(stats.timeouts)
        metrics["scoring/row_errors"] = float(self._row_errors)
        if self._rows:
            metrics["scoring/gated_fraction"] = self._gated / self._rows
        return metrics


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated ``q``-th percentile of already sorted, non-empty values."""
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


class ErrorRateGuard:
    """Stops a run whose verifier fails too often: over the last ``window`` calls of each
    verifier, once it has had at least ``min_calls``, an error-or-timeout rate above
    ``max_error_rate`` raises :class:`RunError` from :meth:`check`. ``max_error_rate = 1`` disables it."""

    def __init__(self, max_error_rate: float, window: int, min_calls: int, *, what: str = "verifier") -> None:
        """``what``: the kind of thing guarded, as messages name it (``"environment"`` for episodes)."""
        self.what = what
        if not 0.0 <= max_error_rate <= 1.0:
            raise ValueError(f"max_error_rate must be in [0, 1], got {max_error_rate}")
        if not 1 <= min_calls <= window:
            raise ValueError(f"need 1 <= min_calls <= window, got min_calls={min_calls}, window={window}")
        self.max_error_rate = max_error_rate
        self.min_calls = min_calls
        self._window = window
        self._failed: dict[str, deque[bool]] = {}
        self._last_error: dict[str, tuple[Any, str]] = {}

    @property
    def enabled(self) -> bool:
        return self.max_error_rate < 1.0

    def add(self, verifier: str, outcome: CallOutcome, row_id: Any) -> None:
        if not self.enabled:
            return
        self._failed.setdefault(verifier, deque(maxlen=self._window)).append(outcome.error is not None)
        if outcome.error is not None:
            self._last_error[verifier] = (row_id, outcome.error)

    def check(self) -> None:
        """Raise :class:`RunError` naming the first verifier over the limit (sorted by name)."""
        for verifier, failed in sorted(self._failed.items()):
            if len(failed) < self.min_calls:
                continue
            rate = sum(failed) / len(failed)
            if rate > self.max_error_rate:
                row_id, error = self._last_error[verifier]
                raise RunError(
                    f"{self.what} {verifier!r} failed {sum(failed)} of its last {len(failed)} calls "
                    f"({rate:.0%}, above scoring.max_error_rate = {self.max_error_rate:g}); "
                    f"last error (row {row_id!r}): {error}. Fix the {self.what}, its config or the data, "
                    f"or raise scoring.max_error_rate (1.0 disables this check)"
                )
