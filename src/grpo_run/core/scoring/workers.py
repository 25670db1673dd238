"""Verifier calls and the worker processes that run them for the scoring runtime.

A worker process builds every enabled sync verifier once from its ``(class, config)`` spec,
then serves chunks. A chunk is a list of *units*: a unit is one call, or a batch of calls to one
verifier that has ``score_batch``. The worker answers a chunk with one list of
:class:`CallOutcome` per unit, one message each way per chunk so IPC stays small next to the work.

Time limits are enforced from the parent, without signals: before each unit the worker writes
the unit's index in the chunk and its start time (``time.monotonic``, system-wide on Linux) into
a small shared array. The parent waits on the pipe until the running unit's deadline (the
per-call limit times the unit's number of calls); when a unit overruns, the parent kills the
process, records a timeout for each of its calls and re-sends the rest of the chunk to a fresh
worker (units already finished in the killed worker are run again: they were never sent back).

:func:`run_unit` and :func:`outcome_of` are shared with the async runner
(:mod:`grpo_run.core.scoring.async_verifiers`), so both paths judge results the same way.
"""

from __future__ import annotations

import math
import multiprocessing
import multiprocessing.connection
import numbers
import signal
import time
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from grpo_run.core.plugins.types import VerifierResult
from grpo_run.core.errors import RunError
from grpo_run.core.scoring.policy import VerifierPolicy, verifier_policy
from grpo_run.core.scoring.spawn_main import main_without_missing_file

VerifierSpecs = Mapping[str, tuple[type, Any]]
"""Enabled verifiers: name -> (component class, its config instance)."""

STARTUP_TIMEOUT_S = 120.0
"""How long a new worker may take to import and build its verifiers before it is given up."""
_IDLE_POLL_S = 0.5
"""Pipe wait while the worker has not started a call yet (no deadline is running)."""
_IDLE = -1.0


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
            score, applicable, metrics = _unpack(result, policy.score_range)
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
    except Exception as exc:  # isolation: a verifier bug costs rewards, never the run
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
        progress[0] = _IDLE
    return outcomes


def worker_main(conn: multiprocessing.connection.Connection, specs: VerifierSpecs, progress: Any) -> None:
    """Entry point of a worker process: build verifiers, then serve chunks until ``None``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    try:
        verifiers = build_verifiers(specs)
        policies = build_policies(specs)
    except BaseException as exc:
        conn.send(("init_error", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", None))
    while True:
        try:
            units = conn.recv()
        except (EOFError, OSError):  # the parent went away
            return
        if units is None:
            return
        conn.send(run_units(verifiers, policies, units, progress))


class WorkerProcess:
    """One killable worker process, started on first use and replaced after a kill.

    Not thread-safe: one thread at a time drives a worker (the scorer hands workers out).
    """

    def __init__(self, specs: VerifierSpecs, timeout_s: float, context: Any = None) -> None:
        self._specs = specs
        self._timeout_s = timeout_s
        self._ctx = context if context is not None else multiprocessing.get_context("spawn")
        self._process: Any = None
        self._conn: multiprocessing.connection.Connection | None = None
        self._progress: Any = None
        self._ready = False

    @property
    def pid(self) -> int | None:
        """Process id of the live worker, if any."""
        return self._process.pid if self._process is not None else None

    def spawn(self) -> None:
        """Start the process if none is running (returns at once; see :meth:`wait_ready`)."""
        if self._process is not None:
            return
        parent_conn, child_conn = self._ctx.Pipe()
        self._progress = self._ctx.RawArray("d", [_IDLE, 0.0])
        self._process = self._ctx.Process(
            target=worker_main, args=(child_conn, self._specs, self._progress), name="grpo-run-scoring", daemon=True
        )
        with main_without_missing_file():  # `python -`: no main file for the child to re-run
            self._process.start()
        child_conn.close()
        self._conn = parent_conn
        self._ready = False

    def wait_ready(self) -> None:
        """Block until the worker has built its verifiers; :class:`RunError` if it cannot."""
        self.spawn()
        if self._ready:
            return
        assert self._conn is not None
        reply: Any = None
        try:
            if self._conn.poll(STARTUP_TIMEOUT_S):
                reply = self._conn.recv()
        except (EOFError, OSError):
            pass
        if not (isinstance(reply, tuple) and reply[0] == "ready"):
            code = self.kill()
            detail = reply[1] if isinstance(reply, tuple) else f"no answer (exit code {code})"
            raise RunError(f"a scoring worker could not start its verifiers: {detail}")
        self._ready = True

    def run_chunk(self, units: Sequence[Unit]) -> list[list[CallOutcome]]:
        """Run ``units`` in the worker; an overrunning unit is killed and its calls time out.

        The unit running when the worker dies gets the error. A death outside any unit (e.g. the
        idle worker was killed from outside) re-sends the chunk to a fresh worker once; a second
        such death fails the units left.
        """
        outcomes: list[list[CallOutcome] | None] = [None] * len(units)
        pending = list(range(len(units)))
        retried = False
        while pending:
            sent = [units[i] for i in pending]
            self._send(sent)
            reply = self._await_reply(sent)
            if isinstance(reply, list):
                for i, unit_outcomes in zip(pending, reply, strict=True):
                    outcomes[i] = unit_outcomes
                break
            failed_at, error, timed_out = reply
            if failed_at is not None:
                latency = self._timeout_s if timed_out else 0.0
                outcomes[pending[failed_at]] = failed_outcomes(len(units[pending[failed_at]]), latency, error, timed_out)
                del pending[failed_at]
            elif not retried:
                retried = True
            else:
                for i in pending:
                    outcomes[i] = failed_outcomes(len(units[i]), 0.0, error)
                break
        return [o for o in outcomes if o is not None]

    def _send(self, units: list[Unit]) -> None:
        """Send a chunk, replacing a worker that died while idle (once)."""
        for attempt in (1, 2):
            self.wait_ready()
            assert self._conn is not None
            try:
                self._conn.send(units)
                return
            except OSError:  # broken pipe: the idle worker was killed from outside
                self.kill()
                if attempt == 2:
                    raise

    def _await_reply(self, units: list[Unit]) -> list[list[CallOutcome]] | tuple[int | None, str, bool]:
        """The chunk's outcomes, or (index of the unit to blame, error, timed out) after a kill."""
        assert self._conn is not None
        while True:
            index = int(self._progress[0])  # index before start time: the worker writes them reversed
            started = self._progress[1]
            if index < 0:
                wait = _IDLE_POLL_S
            else:
                wait = started + self._timeout_s * len(units[index]) - time.monotonic()
            if wait > 0:
                try:
                    if self._conn.poll(wait):
                        return self._conn.recv()
                except (EOFError, OSError):  # EOF, or ECONNRESET when it died with our data unread
                    code = self.kill()
                    return (index if index >= 0 else None), f"worker process died (exit code {code})", False
            elif int(self._progress[0]) == index and self._progress[1] == started:  # still the same unit
                self.kill()
                limit = self._timeout_s * len(units[index])
                what = "timed out" if len(units[index]) == 1 else f"batch of {len(units[index])} timed out"
                return index, f"{what} after {limit:g}s (worker killed)", True

    def kill(self) -> int | None:
        """Kill the process at once and reap it (returns its exit code); the next chunk starts a fresh one."""
        if self._process is None:
            return None
        self._process.kill()
        self._process.join()
        code = self._process.exitcode
        self._release()
        return code

    def close(self, grace_s: float = 2.0) -> None:
        """Ask the worker to exit, kill it if it does not within ``grace_s``, and reap it."""
        if self._process is None:
            return
        try:
            assert self._conn is not None
            self._conn.send(None)
        except (OSError, ValueError):
            pass
        self._process.join(grace_s)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        self._release()

    def _release(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._process.close()
        self._process = None
        self._conn = None
        self._ready = False
