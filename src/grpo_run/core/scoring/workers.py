"""Verifier calls, their outcomes, and the code that runs inside a scoring worker process.

A worker process builds every enabled sync verifier once from its ``(class, config)`` spec,
then serves chunks. A chunk is a list of *units*: a unit is one call, or a batch of calls to one
verifier that has ``score_batch``. The worker answers a chunk with one list of
:class:`CallOutcome` per unit, one message each way per chunk so IPC stays small next to the work.
The parent side (time limits, kills, recycling) is :mod:`grpo_run.core.scoring.worker_process`.

A worker ignores SIGINT (the parent decides what a Ctrl-C means), dies with its parent (Linux
``PR_SET_PDEATHSIG``, so not even a SIGKILL of the trainer leaves it behind; both from
:mod:`grpo_run.core.processes`), and never prints a traceback: whatever a verifier raises, ``SystemExit`` and ``KeyboardInterrupt`` included, is that
call's error.

:func:`run_unit` and :func:`outcomes_of` are shared with the async runner
(:mod:`grpo_run.core.scoring.async_verifiers`), so both paths judge results the same way.
"""

from __future__ import annotations

import math
import multiprocessing.connection
import numbers
import pickle
import time
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from grpo_run.core.plugins.types import VerifierResult
from grpo_run.core.processes import enter_worker
from grpo_run.core.scoring.policy import VerifierPolicy, verifier_policy

VerifierSpecs = Mapping[str, tuple[type, Any]]
"""Enabled verifiers: name -> (component class, its config instance)."""

IDLE = -1.0
"""Unit index a worker publishes while it runs no unit."""


@attrs.frozen
class VerifierCall:
    """One verifier applied to one completion."""

    verifier: str
    completion: str
    ground_truth: Any
    row: Mapping[str, Any]


@attrs.frozen
class CallOutcome:
    """What came of one :class:`VerifierCall`. Failed calls have score 0 and an ``error``."""

    score: float
    latency_s: float
    applicable: bool = True
    metrics: Mapping[str, float] = attrs.field(factory=dict)
    error: str | None = None
    timed_out: bool = False


Unit = Sequence[VerifierCall]
"""One call, or a batch of calls to a single batched verifier (sent to ``score_batch`` together)."""


def build_verifiers(specs: VerifierSpecs) -> dict[str, Any]:
    """Construct one instance of each verifier in ``specs``."""
    return {name: cls(config) for name, (cls, config) in specs.items()}


def build_policies(specs: VerifierSpecs) -> dict[str, VerifierPolicy]:
    """How each verifier in ``specs`` is run and combined (see :mod:`grpo_run.core.scoring.policy`)."""
    return {name: verifier_policy(name, cls, config) for name, (cls, config) in specs.items()}


def failed_outcomes(count: int, latency_s: float, error: str, timed_out: bool = False) -> list[CallOutcome]:
    """``count`` failed outcomes sharing one error (a batch fails as a whole)."""
    return [CallOutcome(0.0, latency_s, error=error, timed_out=timed_out) for _ in range(count)]


def batch_items(unit: Unit) -> list[tuple[str, Any, Mapping[str, Any]]]:
    """The ``(completion, ground_truth, row)`` items ``score_batch`` takes."""
    return [(call.completion, call.ground_truth, call.row) for call in unit]


def batch_results(results: Any, expected: int) -> list[Any]:
    """``score_batch``'s results as a list; :class:`TypeError` when it is not one per item."""
    try:
        results = list(results)
    except TypeError:
        raise TypeError(f"score_batch returned {type(results).__name__}, expected a list") from None
    if len(results) != expected:
        raise TypeError(f"score_batch returned {len(results)} results for {expected} items")
    return results


def outcomes_of(results: Sequence[Any], latency_s: float, policy: VerifierPolicy) -> list[CallOutcome]:
    """Judge each returned value; a malformed one becomes an error outcome."""
    outcomes = []
    for result in results:
        try:
            score, applicable, metrics = _unpack(result, policy.returned_range)
        except (TypeError, ValueError) as exc:
            outcomes.append(CallOutcome(0.0, latency_s, error=str(exc)))
        else:
            outcomes.append(CallOutcome(score, latency_s, applicable=applicable, metrics=metrics))
    return outcomes


def run_unit(verifier: Any, policy: VerifierPolicy, unit: Unit) -> list[CallOutcome]:
    """Run one unit (sync); an exception fails all of its calls, a bad value only its own."""
    start = time.perf_counter()
    try:
        if policy.batched:
            results = batch_results(verifier.score_batch(batch_items(unit)), len(unit))
        else:
            results = [verifier.score(call.completion, call.ground_truth, call.row) for call in unit]
    except BaseException as exc:  # isolation: a verifier bug (even sys.exit) costs rewards, never the run
        latency = (time.perf_counter() - start) / len(unit)
        return failed_outcomes(len(unit), latency, describe_exception(exc))
    return outcomes_of(results, (time.perf_counter() - start) / len(unit), policy)


def describe_exception(exc: BaseException) -> str:
    return f"raised {type(exc).__name__}: {exc}"


def _unpack(result: Any, score_range: tuple[float, float]) -> tuple[float, bool, dict[str, float]]:
    if isinstance(result, VerifierResult):
        score, applicable, raw_metrics = result.score, bool(result.applicable), result.metrics
    elif isinstance(result, numbers.Real) and not isinstance(result, bool):
        score, applicable, raw_metrics = result, True, {}
    else:
        raise TypeError(f"returned {type(result).__name__}, expected a VerifierResult or a float")
    if not isinstance(score, numbers.Real) or isinstance(score, bool):
        raise TypeError(f"returned a score of type {type(score).__name__}, expected a float")
    score = float(score)
    low, high = score_range
    if applicable and not (math.isfinite(score) and low <= score <= high):
        raise ValueError(f"returned score {score!r}, expected a finite number in [{low:g}, {high:g}]")
    metrics = {str(k): float(v) for k, v in raw_metrics.items()}
    return score, applicable, metrics


def run_units(
    verifiers: Mapping[str, Any], policies: Mapping[str, VerifierPolicy], units: Sequence[Unit], progress: Any = None
) -> list[list[CallOutcome]]:
    """Run ``units`` in order, publishing (index, start time) of each to ``progress`` if given."""
    outcomes = []
    for index, unit in enumerate(units):
        if progress is not None:
            progress[1] = time.monotonic()  # start time first: the parent reads the index first
            progress[0] = float(index)
        name = unit[0].verifier
        outcomes.append(run_unit(verifiers[name], policies[name], unit))
    if progress is not None:
        progress[0] = IDLE
    return outcomes


def worker_main(conn: multiprocessing.connection.Connection, specs_blob: bytes, progress: Any, parent_pid: int) -> None:
    """Entry point of a worker process: build verifiers, then serve chunks until ``None``.

    ``specs_blob`` is the pickled :data:`VerifierSpecs`: unpickled here, so a verifier class that
    cannot be imported in a fresh process is reported as an ``init_error``, not a traceback.
    Nothing escapes as an exception (multiprocessing would print it to the console).
    """
    enter_worker(parent_pid)
    try:
        try:
            specs = pickle.loads(specs_blob)
            verifiers = build_verifiers(specs)
            policies = build_policies(specs)
        except BaseException as exc:
            conn.send(("init_error", f"{type(exc).__name__}: {exc}"))
            return
        conn.send(("ready", None))
        while True:
            units = conn.recv()
            if units is None:
                return
            conn.send(run_units(verifiers, policies, units, progress))
    except BaseException:  # the parent went away or closed the pipe: nothing left to report to
        return
