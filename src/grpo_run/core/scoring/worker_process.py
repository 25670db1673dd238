"""The worker processes of the scoring runtime, seen from the parent: killable, time-limited,
recycled, each with a single owner.

Time limits are enforced from the parent, without signals: before each unit the worker writes
the unit's index in the chunk and its start time (``time.monotonic``, system-wide on Linux) into
a small shared array. The parent waits on the pipe until the running unit's deadline (the
per-call limit times the unit's number of calls); when a unit overruns, the parent kills the
process, records a timeout for each of its calls and re-sends the rest of the chunk to a fresh
worker (units already finished in the killed worker are run again: they were never sent back).

Lifecycle: a :class:`WorkerProcess` has one owner, the thread that drives it
(:class:`~grpo_run.core.scoring.sync_verifiers.SyncVerifiers` gives each worker its own thread);
that thread spawns, kills, recycles and closes it. Other threads only set the shared ``cancel``
event, which makes every wait give up within :data:`WAIT_SLICE_S` and kill the worker.
"""

from __future__ import annotations

import multiprocessing.connection
import threading
import time
from collections.abc import Sequence
from typing import Any

from grpo_run.core.errors import RunError
from grpo_run.core.processes import kill_worker, start_worker, stop_worker
from grpo_run.core.spawn import spawn_context
from grpo_run.core.scoring.workers import IDLE, CallOutcome, Unit, failed_outcomes, worker_main

STARTUP_TIMEOUT_S = 120.0
"""How long a new worker may take to import and build its verifiers before it is given up."""
WAIT_SLICE_S = 0.2
"""Longest single wait on a worker's pipe: how soon a set ``cancel`` event is noticed."""
CANCELLED = "cancelled: scoring stopped"
"""Error of the calls a stop (Ctrl-C, a guard that tripped, close) left unfinished."""


class WorkerProcess:
    """One killable worker process, started on first use and replaced after a kill.

    Not thread-safe: one thread owns it (spawns, drives, kills, recycles and closes it); other
    threads may only set ``cancel`` and read :attr:`pid`.
    """

    def __init__(self, specs_blob: bytes, timeout_s: float, cancel: threading.Event | None = None,
                 context: Any = None) -> None:
        self._specs_blob = specs_blob
        self._timeout_s = timeout_s
        self._cancel = cancel if cancel is not None else threading.Event()
        self._ctx = context if context is not None else spawn_context()
        self._process: Any = None
        self._conn: multiprocessing.connection.Connection | None = None
        self._progress: Any = None
        self._ready = False
        self.calls_served = 0
        """Calls answered by the current process (reset when it is replaced)."""

    @property
    def pid(self) -> int | None:
        """Process id of the live worker, if any."""
        process = self._process
        return process.pid if process is not None else None

    def spawn(self) -> None:
        """Start the process if none is running (returns at once; see :meth:`wait_ready`)."""
        if self._process is not None:
            return
        self._progress = self._ctx.RawArray("d", [IDLE, 0.0])
        self._process, self._conn = start_worker(
            self._ctx, worker_main, (self._specs_blob, self._progress), "grpo-run-scoring"
        )
        self._ready = False
        self.calls_served = 0

    def wait_ready(self) -> None:
        """Block until the worker has built its verifiers; :class:`RunError` if it cannot."""
        self.spawn()
        if self._ready:
            return
        assert self._conn is not None
        reply: Any = None
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        try:
            while not self._cancel.is_set() and time.monotonic() < deadline:
                if self._conn.poll(WAIT_SLICE_S):
                    reply = self._conn.recv()
                    break
        except (EOFError, OSError):
            pass
        if not (isinstance(reply, tuple) and reply[0] == "ready"):
            code = self.kill()
            if self._cancel.is_set():
                raise RunError(CANCELLED)
            detail = reply[1] if isinstance(reply, tuple) else f"no answer (exit code {code})"
            raise RunError(f"a scoring worker could not start its verifiers: {detail}")
        self._ready = True

    def run_chunk(self, units: Sequence[Unit], on_unit: Any = None) -> list[list[CallOutcome]]:
        """Run ``units`` in the worker; an overrunning unit is killed and its calls time out.

        The unit running when the worker dies gets the error. A death outside any unit (e.g. the
        idle worker was killed from outside) re-sends the chunk to a fresh worker once; a second
        such death fails the units left. Once ``cancel`` is set the worker is killed and the
        units left fail with :data:`CANCELLED`. ``on_unit(unit, outcomes)`` hears each unit's
        outcomes as soon as they are known (a timeout at once, the rest when the chunk returns).
        """
        outcomes: list[list[CallOutcome] | None] = [None] * len(units)
        pending = list(range(len(units)))
        retried = False

        def settle(i: int, result: list[CallOutcome]) -> None:
            outcomes[i] = result
            if on_unit is not None:
                on_unit(units[i], result)

        while pending:
            if self._cancel.is_set():
                break
            sent = [units[i] for i in pending]
            try:
                self._send(sent)
            except RunError as exc:
                if self._cancel.is_set():
                    break
                raise exc from None
            reply = self._await_reply(sent)
            if isinstance(reply, list):
                self.calls_served += sum(len(u) for u in sent)
                for i, unit_outcomes in zip(pending, reply, strict=True):
                    settle(i, unit_outcomes)
                pending = []
                break
            failed_at, error, timed_out = reply
            if failed_at is not None:
                latency = self._timeout_s if timed_out else 0.0
                index = pending.pop(failed_at)
                settle(index, failed_outcomes(len(units[index]), latency, error, timed_out))
            elif self._cancel.is_set():
                break
            elif not retried:
                retried = True
            else:
                for i in pending:
                    settle(i, failed_outcomes(len(units[i]), 0.0, error))
                pending = []
        for i in pending:  # cancelled
            outcomes[i] = failed_outcomes(len(units[i]), 0.0, CANCELLED)
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
                    raise RunError("a scoring worker died twice before it could take a chunk") from None

    def _await_reply(self, units: list[Unit]) -> list[list[CallOutcome]] | tuple[int | None, str, bool]:
        """The chunk's outcomes, or (index of the unit to blame, error, timed out) after a kill."""
        assert self._conn is not None
        while True:
            index = int(self._progress[0])  # index before start time: the worker writes them reversed
            started = self._progress[1]
            if self._cancel.is_set():
                self.kill()
                return None, CANCELLED, False
            if index < 0:
                wait = WAIT_SLICE_S
            else:
                wait = min(WAIT_SLICE_S, started + self._timeout_s * len(units[index]) - time.monotonic())
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

    def rss_bytes(self) -> int:
        """Resident memory of the live worker (0 when none is running or it cannot be read)."""
        pid = self.pid
        if pid is None:
            return 0
        import psutil

        try:
            return int(psutil.Process(pid).memory_info().rss)
        except psutil.Error:
            return 0

    def kill(self) -> int | None:
        """Kill the process at once and reap it (returns its exit code); the next chunk starts a fresh one."""
        if self._process is None:
            return None
        code = kill_worker(self._process)
        self._release()
        return code

    def close(self, grace_s: float = 2.0) -> None:
        """Ask the worker to exit, kill it if it does not within ``grace_s``, and reap it."""
        if self._process is None:
            return
        stop_worker(self._process, self._conn, grace_s)
        self._release()

    def _release(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._process.close()
        self._process = None
        self._conn = None
        self._ready = False
