"""Per-verifier statistics of the scoring runtime, reported under ``verifier/<name>/...``."""

from __future__ import annotations

import math
from collections import defaultdict

import attrs

from grpo_run.core.scoring_workers import CallOutcome

STANDARD_KEYS = ("count", "mean_score", "correct_rate", "latency_p50_ms", "latency_p95_ms", "errors", "timeouts")
"""Keys every verifier that had calls reports; verifier-specific metrics cannot override them."""


@attrs.define
class VerifierStats:
    """Running totals for one verifier since the last :meth:`ScoringMetrics.pop`."""

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
    """Accumulates call outcomes per verifier and reports them as flat step metrics."""

    def __init__(self) -> None:
        self._stats: dict[str, VerifierStats] = {}
        self._row_errors = 0

    def add(self, verifier: str, outcome: CallOutcome) -> None:
        self._stats.setdefault(verifier, VerifierStats()).add(outcome)

    def add_row_error(self) -> None:
        """A row that could not be fully dispatched (e.g. it names a verifier not enabled)."""
        self._row_errors += 1

    def pop(self) -> dict[str, float]:
        """Metrics since the last pop, then reset. Only verifiers that had calls report; a mean
        with nothing to average (no applicable call, no call that returned) is left out, not NaN."""
        metrics: dict[str, float] = {}
        for name, stats in sorted(self._stats.items()):
            prefix = f"verifier/{name}/"
            for key, values in stats.extra.items():
                if key not in STANDARD_KEYS and values:
                    metrics[prefix + key] = sum(values) / len(values)
            scores = stats.scores
            latencies_ms = sorted(1000.0 * s for s in stats.latencies_s)
            metrics[prefix + "count"] = float(len(scores))
            if scores:
                metrics[prefix + "mean_score"] = sum(scores) / len(scores)
                metrics[prefix + "correct_rate"] = sum(s == 1.0 for s in scores) / len(scores)
            if latencies_ms:
                metrics[prefix + "latency_p50_ms"] = percentile(latencies_ms, 50.0)
                metrics[prefix + "latency_p95_ms"] = percentile(latencies_ms, 95.0)
            metrics[prefix + "errors"] = float(stats.errors)
            metrics[prefix + "timeouts"] = float(stats.timeouts)
        metrics["scoring/row_errors"] = float(self._row_errors)
        self._stats = {}
        self._row_errors = 0
        return metrics


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated ``q``-th percentile of already sorted, non-empty values."""
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)
