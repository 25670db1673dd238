"""Sync verifiers of the scoring runtime: units of calls dispatched to killable worker processes.

The scorer hands over *units* (one call, or a batch for a batched verifier); they are grouped into
chunks of about ``chunk_size`` calls and put on one job queue. Each worker process has its own
driver thread, its single owner: the thread takes a chunk, runs it through its worker
(:class:`~grpo_run.core.scoring.worker_process.WorkerProcess`), answers the chunk's future,
recycles the worker when it has served ``max_calls_per_worker`` calls or grown above
``max_worker_rss_mb``, and closes it when the pool stops. Several :meth:`SyncVerifiers.run` calls
may be in flight at once; they share the queue.

Stopping (:meth:`SyncVerifiers.close`, or :meth:`SyncVerifiers.abort` when a guard trips) sets one
``cancel`` event: every driver kills its worker within a fraction of a second, the calls left
fail as cancelled, and the threads exit -- no other thread ever touches a worker. With
``num_workers = 0`` units run in one thread of this process (no time limit).
"""

from __future__ import annotations

import asyncio
import math
import os
import pickle
import queue
import signal
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import structlog

from grpo_run.core.errors import RunError
from grpo_run.core.scoring.policy import VerifierPolicy
from grpo_run.core.scoring.worker_process import CANCELLED, WorkerProcess
from grpo_run.core.scoring.workers import (
    CallOutcome,
    Unit,
    VerifierSpecs,
    build_verifiers,
    failed_outcomes,
    run_units,
)

MAX_CHUNK = 64
"""Most calls sent to a worker in one message."""
CLOSE_GRACE_S = 5.0
"""How long :meth:`SyncVerifiers.close` waits for the driver threads to stop their workers."""

logger = structlog.get_logger()

UnitListener = Callable[[Unit, list[CallOutcome]], None]
_Job = tuple[list[Unit], Future]


class SyncVerifiers:
    """The sync verifiers of one scorer and the worker processes that run them."""

    def __init__(
        self,
        specs: VerifierSpecs,
        policies: Mapping[str, VerifierPolicy],
        num_workers: int,
        timeout_s: float,
        chunk_size: int | None,
        *,
        max_calls_per_worker: int = 0,
        max_worker_rss_mb: float = 0.0,
        on_unit: UnitListener | None = None,
    ) -> None:
        self._specs = specs
        self._policies = policies
        self.num_workers = num_workers
        self.chunk_size = chunk_size
        self.max_calls_per_worker = max_calls_per_worker
        self.max_worker_rss_mb = max_worker_rss_mb
        self._on_unit = on_unit
        blob = self._pickled_specs(num_workers)
        self._local_verifiers: dict[str, Any] | None = None
        self._cancel = threading.Event()
        self._abort_reason: str | None = None
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._workers = [WorkerProcess(blob, timeout_s, self._cancel) for _ in range(num_workers)]
        self._drivers: list[threading.Thread] = []
        self._broken: RunError | None = None
        self._started = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grpo-run-scoring-local")
        self.recycled = 0
        """Workers replaced because of ``max_calls_per_worker`` or ``max_worker_rss_mb``."""

    @property
    def worker_pids(self) -> list[int]:
        return [pid for pid in (w.pid for w in self._workers) if pid is not None]

    def describe(self) -> list[dict[str, Any]]:
        """Where these verifiers run (the run's ``pipeline.json``): one entry, or none without verifiers."""
        if not self._specs:
            return []
        where = "worker processes" if self.num_workers else "training process"
        return [{"verifiers": list(self._specs), "where": where, "pids": self.worker_pids if self.num_workers
                 else [os.getpid()]}]

    def start(self) -> None:
        """Start every worker now (in parallel) and wait until all are ready; with no workers,
        build the verifiers here now."""
        if self.num_workers == 0:
            self._build_local()
            return
        ready = [Future() for _ in self._workers]
        self._start_drivers(ready)
        for future in ready:
            future.result()

    def abort(self, reason: str) -> None:
        """Stop every call in flight now (kill the workers); later calls fail with ``reason``."""
        self._abort_reason = reason
        self._cancel.set()

    def close(self) -> None:
        """Stop the drivers (they kill and reap their workers); waits at most :data:`CLOSE_GRACE_S`."""
        self._cancel.set()
        for _ in self._drivers:
            self._jobs.put(None)
        deadline = time.monotonic() + CLOSE_GRACE_S
        for thread in self._drivers:
            thread.join(max(0.0, deadline - time.monotonic()))
        for worker, thread in zip(self._workers, self._drivers, strict=False):
            pid = worker.pid
            if thread.is_alive() and pid is not None:  # its owner is stuck: the last resort is the pid
                logger.warning("scoring worker driver did not stop; killing its worker", thread=thread.name, pid=pid)
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def run(self, units: list[Unit]) -> list[list[CallOutcome]]:
        """One outcome list per unit, in order; waits in threads, never blocks the event loop."""
        if not units:
            return []
        if self._cancel.is_set():
            raise RunError(self._abort_reason or CANCELLED)
        loop = asyncio.get_running_loop()
        if self.num_workers == 0:
            return await loop.run_in_executor(self._executor, self._run_local, units)
        self._start_drivers()
        futures: list[tuple[int, Future]] = []
        for start, chunk in self._chunks(units):
            future: Future = Future()
            self._jobs.put((chunk, future))
            futures.append((start, future))
        waiting = [asyncio.wrap_future(f) for _, f in futures]
        try:
            done = await asyncio.gather(*waiting)
        except BaseException:
            for f in waiting:  # a chunk not started yet is skipped by its driver
                f.cancel()
            raise
        outcomes: list[list[CallOutcome]] = [None] * len(units)  # type: ignore[list-item]
        for (first, _), chunk_outcomes in zip(futures, done, strict=True):
            outcomes[first : first + len(chunk_outcomes)] = chunk_outcomes
        return outcomes

    # -- driver threads ------------------------------------------------------------------------

    def _start_drivers(self, ready: list[Future] | None = None) -> None:
        with self._started:
            if self._drivers:
                if ready is not None:
                    for future in ready:
                        future.set_result(None)
                return
            for i, worker in enumerate(self._workers):
                thread = threading.Thread(
                    target=self._drive, args=(worker, ready[i] if ready else None),
                    name=f"grpo-run-scoring-{i}", daemon=True,
                )
                thread.start()
                self._drivers.append(thread)

    def _drive(self, worker: WorkerProcess, ready: Future | None) -> None:
        """Thread body, the worker's only owner: run chunks until told to stop, then close it."""
        try:
            if ready is not None:
                self._settle(ready, worker.wait_ready)
            while (job := self._jobs.get()) is not None:
                chunk, future = job
                if not future.set_running_or_notify_cancel():
                    continue
                if self._broken is not None:
                    future.set_exception(self._broken)
                    continue
                if self._cancel.is_set():  # stopping: what never ran is cancelled, not an error
                    future.set_result([failed_outcomes(len(unit), 0.0, CANCELLED) for unit in chunk])
                    continue
                self._settle(future, lambda: worker.run_chunk(chunk, self._on_unit))
                self._maybe_recycle(worker)
        finally:
            worker.close()

    def _settle(self, future: Future, work: Callable[[], Any]) -> None:
        try:
            result = work()
        except RunError as exc:
            if not self._cancel.is_set():
                self._broken = exc  # verifiers that cannot start will not start next time either
            future.set_exception(exc)
        except BaseException as exc:  # a bug here must reach the caller, not kill the thread
            future.set_exception(exc)
        else:
            future.set_result(result)

    def _maybe_recycle(self, worker: WorkerProcess) -> None:
        """Replace a worker that served its quota of calls or grew too big (a leaking verifier)."""
        reason = None
        if self.max_calls_per_worker and worker.calls_served >= self.max_calls_per_worker:
            reason = f"served {worker.calls_served} calls (scoring.max_calls_per_worker = {self.max_calls_per_worker})"
        elif self.max_worker_rss_mb:
            rss_mb = worker.rss_bytes() / 2**20
            if rss_mb > self.max_worker_rss_mb:
                reason = f"uses {rss_mb:.0f} MiB (scoring.max_worker_rss_mb = {self.max_worker_rss_mb:g})"
        if reason is not None:
            logger.info("scoring worker recycled", pid=worker.pid, reason=reason)
            worker.close()
            self.recycled += 1

    # -- helpers -------------------------------------------------------------------------------

    def _chunks(self, units: list[Unit]) -> list[tuple[int, list[Unit]]]:
        """Consecutive units grouped into chunks of about ``chunk_size`` calls: (first index, units)."""
        total = sum(len(u) for u in units)
        size = self.chunk_size or max(1, min(MAX_CHUNK, math.ceil(total / (4 * self.num_workers))))
        chunks: list[tuple[int, list[Unit]]] = []
        start, chunk, filled = 0, [], 0
        for index, unit in enumerate(units):
            chunk.append(unit)
            filled += len(unit)
            if filled >= size or index == len(units) - 1:
                chunks.append((start, chunk))
                start, chunk, filled = index + 1, [], 0
        return chunks

    def _build_local(self) -> dict[str, Any]:
        if self._local_verifiers is None:
            try:
                self._local_verifiers = build_verifiers(self._specs)
            except Exception as exc:  # as a worker that cannot start: one line, not a traceback
                raise RunError(f"the verifiers could not be built: {type(exc).__name__}: {exc}") from None
        return self._local_verifiers

    def _run_local(self, units: list[Unit]) -> list[list[CallOutcome]]:
        outcomes = run_units(self._build_local(), self._policies, units)
        if self._on_unit is not None:
            for unit, unit_outcomes in zip(units, outcomes, strict=True):
                self._on_unit(unit, unit_outcomes)
        return outcomes

    def _pickled_specs(self, num_workers: int) -> bytes:
        if num_workers == 0:
            return b""
        for name, spec in self._specs.items():
            try:
                pickle.dumps(spec)
            except Exception as exc:
                raise ValueError(
                    f"verifier {name!r}: its class and config must be picklable to run in worker "
                    f"processes (define them at module level): {type(exc).__name__}: {exc}"
                ) from exc
        return pickle.dumps(dict(self._specs))
