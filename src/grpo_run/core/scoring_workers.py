"""Verifier calls and the worker processes that run them for the scoring runtime.

A worker process builds every enabled verifier once from its ``(class, config)`` spec, then
serves chunks: it receives a list of :class:`VerifierCall` and answers with the list of
:class:`CallOutcome`, one message each way per chunk so IPC stays small next to the work.

Time limits are enforced from the parent, without signals: before each call the worker writes
the call's index in the chunk and its start time (``time.monotonic``, system-wide on Linux) into
a small shared array. The parent waits on the pipe until the running call's deadline; when a call
overruns, the parent kills the process, records a timeout for that call and re-sends the rest of
the chunk to a fresh worker (calls already finished in the killed worker are run again: they
were never sent back).
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

from grpo_run.core.components import VerifierResult

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


def build_verifiers(specs: VerifierSpecs) -> dict[str, Any]:
    """Construct one instance of each enabled verifier."""
    return {name: cls(config) for name, (cls, config) in specs.items()}


def run_call(verifier: Any, call: VerifierCall) -> CallOutcome:
    """Run one call; an exception or a malformed return value becomes an error outcome."""
    start = time.perf_counter()
    try:
        result = verifier.score(call.completion, call.ground_truth, call.row)
    except Exception as exc:  # isolation: a verifier bug costs one reward, never the run
        return CallOutcome(0.0, time.perf_counter() - start, error=f"raised {type(exc).__name__}: {exc}")
    latency = time.perf_counter() - start
    try:
        score, applicable, metrics = _unpack(result)
    except (TypeError, ValueError) as exc:
        return CallOutcome(0.0, latency, error=str(exc))
    return CallOutcome(score, latency, applicable=applicable, metrics=metrics)


def _unpack(result: Any) -> tuple[float, bool, dict[str, float]]:
    if isinstance(result, VerifierResult):
        score, applicable, raw_metrics = result.score, bool(result.applicable), result.metrics
    elif isinstance(result, numbers.Real) and not isinstance(result, bool):
        score, applicable, raw_metrics = result, True, {}
    else:
        raise TypeError(f"returned {type(result).__name__}, expected a VerifierResult or a float")
    if not isinstance(score, numbers.Real) or isinstance(score, bool):
        raise TypeError(f"returned a score of type {type(score).__name__}, expected a float")
    score = float(score)
    if not math.isfinite(score) or not 0.0 <= score <= 1.0:
        raise ValueError(f"returned score {score!r}, expected a finite number in [0, 1]")
    metrics = {str(k): float(v) for k, v in raw_metrics.items()}
    return score, applicable, metrics


def run_calls(verifiers: Mapping[str, Any], calls: Sequence[VerifierCall], progress: Any = None) -> list[CallOutcome]:
    """Run ``calls`` in order, publishing (index, start time) of each to ``progress`` if given."""
    outcomes = []
    for index, call in enumerate(calls):
        if progress is not None:
            progress[1] = time.monotonic()  # start time first: the parent reads the index first
            progress[0] = float(index)
        outcomes.append(run_call(verifiers[call.verifier], call))
    if progress is not None:
        progress[0] = _IDLE
    return outcomes


def worker_main(conn: multiprocessing.connection.Connection, specs: VerifierSpecs, progress: Any) -> None:
    """Entry point of a worker process: build verifiers, then serve chunks until ``None``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    try:
        verifiers = build_verifiers(specs)
    except BaseException as exc:
        conn.send(("init_error", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", None))
    while True:
        try:
            calls = conn.recv()
        except EOFError:  # the parent went away
            return
        if calls is None:
            return
        conn.send(run_calls(verifiers, calls, progress))


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
        self._process.start()
        child_conn.close()
        self._conn = parent_conn
        self._ready = False

    def wait_ready(self) -> None:
        """Block until the worker has built its verifiers; :class:`RuntimeError` if it cannot."""
        self.spawn()
        if self._ready:
            return
        assert self._conn is not None
        reply: Any = None
        try:
            if self._conn.poll(STARTUP_TIMEOUT_S):
                reply = self._conn.recv()
        except EOFError:
            pass
        if not (isinstance(reply, tuple) and reply[0] == "ready"):
            code = self.kill()
            detail = reply[1] if isinstance(reply, tuple) else f"no answer (exit code {code})"
            raise RuntimeError(f"a scoring worker could not start its verifiers: {detail}")
        self._ready = True

    def run_chunk(self, calls: Sequence[VerifierCall]) -> list[CallOutcome]:
        """Run ``calls`` in the worker; overrunning calls are killed and become timeouts."""
        outcomes: list[CallOutcome | None] = [None] * len(calls)
        pending = list(range(len(calls)))
        while pending:
            self.wait_ready()
            assert self._conn is not None
            self._conn.send([calls[i] for i in pending])
            reply = self._await_reply()
            if isinstance(reply, list):
                for i, outcome in zip(pending, reply, strict=True):
                    outcomes[i] = outcome
                break
            failed_at, outcome = reply
            if failed_at is None:  # died between calls: nothing to blame, fail what is left
                for i in pending:
                    outcomes[i] = outcome
                break
            outcomes[pending[failed_at]] = outcome
            del pending[failed_at]
        return [o for o in outcomes if o is not None]

    def _await_reply(self) -> list[CallOutcome] | tuple[int | None, CallOutcome]:
        """The chunk's outcomes, or (index of the call to blame, its outcome) after a kill."""
        assert self._conn is not None
        while True:
            index = int(self._progress[0])  # index before start time: the worker writes them reversed
            started = self._progress[1]
            wait = _IDLE_POLL_S if index < 0 else started + self._timeout_s - time.monotonic()
            if wait > 0:
                try:
                    if self._conn.poll(wait):
                        return self._conn.recv()
                except EOFError:
                    code = self.kill()
                    error = f"worker process died (exit code {code})"
                    return (index if index >= 0 else None), CallOutcome(0.0, 0.0, error=error)
            elif int(self._progress[0]) == index and self._progress[1] == started:  # still the same call
                self.kill()
                error = f"timed out after {self._timeout_s:g}s (worker killed)"
                return index, CallOutcome(0.0, self._timeout_s, error=error, timed_out=True)

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
