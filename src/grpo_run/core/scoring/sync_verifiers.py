"""Sync verifiers of the scoring runtime: units of calls dispatched to killable worker processes.

The scorer hands over *units* (one call, or a batch for a batched verifier); they are grouped into
chunks of about ``chunk_size`` calls, and one thread per worker drains the chunk queue through its
worker (:class:`~grpo_run.core.scoring.workers.WorkerProcess`). Several :meth:`SyncVerifiers.run`
calls may be in flight at once: each thread holds at most one worker and gives it back when its
queue is empty, so calls share the workers without deadlock. With ``num_workers = 0`` units run
in one thread of this process (no time limit).
"""

from __future__ import annotations

import asyncio
import math
import pickle
import queue
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from grpo_run.core.scoring.policy import VerifierPolicy
from grpo_run.core.scoring.workers import CallOutcome, Unit, VerifierSpecs, WorkerProcess, build_verifiers, run_units

MAX_CHUNK = 64
"""Most calls sent to a worker in one message."""


class SyncVerifiers:
    """The sync verifiers of one scorer and the worker processes that run them."""

    def __init__(
        self,
        specs: VerifierSpecs,
        policies: Mapping[str, VerifierPolicy],
        num_workers: int,
        timeout_s: float,
        chunk_size: int | None,
    ) -> None:
        self._specs = specs
        self._policies = policies
        self.num_workers = num_workers
        self.chunk_size = chunk_size
        self._check_picklable(num_workers)
        self._local_verifiers: dict[str, Any] | None = None
        self._workers = [WorkerProcess(specs, timeout_s) for _ in range(num_workers)]
        self._idle: queue.SimpleQueue[WorkerProcess] = queue.SimpleQueue()
        for worker in self._workers:
            self._idle.put(worker)
        self._executor = ThreadPoolExecutor(max_workers=max(1, num_workers), thread_name_prefix="grpo-run-scoring")

    @property
    def worker_pids(self) -> list[int]:
        return [pid for pid in (w.pid for w in self._workers) if pid is not None]

    def start(self) -> None:
        """Start every worker now (in parallel)."""
        for worker in self._workers:
            worker.spawn()
        for worker in self._workers:
            worker.wait_ready()

    def close(self) -> None:
        for worker in self._workers:
            worker.close()
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def run(self, units: list[Unit]) -> list[list[CallOutcome]]:
        """One outcome list per unit, in order; waits in threads, never blocks the event loop."""
        if not units:
            return []
        loop = asyncio.get_running_loop()
        if self.num_workers == 0:
            return await loop.run_in_executor(self._executor, self._run_local, units)
        total = sum(len(u) for u in units)
        size = self.chunk_size or max(1, min(MAX_CHUNK, math.ceil(total / (4 * self.num_workers))))
        chunks: queue.SimpleQueue[tuple[int, list[Unit]]] = queue.SimpleQueue()
        start, chunk, filled, count = 0, [], 0, 0
        for index, unit in enumerate(units):
            chunk.append(unit)
            filled += len(unit)
            if filled >= size or index == len(units) - 1:
                chunks.put((start, chunk))
                count += 1
                start, chunk, filled = index + 1, [], 0
        drainers = min(self.num_workers, count)
        done = await asyncio.gather(
            *(loop.run_in_executor(self._executor, self._drain, chunks) for _ in range(drainers))
        )
        outcomes: list[list[CallOutcome]] = [None] * len(units)  # type: ignore[list-item]
        for first, chunk_outcomes in (item for results in done for item in results):
            outcomes[first : first + len(chunk_outcomes)] = chunk_outcomes
        return outcomes

    def _drain(self, chunks: queue.SimpleQueue[tuple[int, list[Unit]]]) -> list[tuple[int, list[list[CallOutcome]]]]:
        """Thread body: take a worker, run chunks until none are left, give the worker back."""
        worker = self._idle.get()
        results = []
        try:
            while True:
                try:
                    start, chunk = chunks.get_nowait()
                except queue.Empty:
                    return results
                results.append((start, worker.run_chunk(chunk)))
        finally:
            self._idle.put(worker)

    def _run_local(self, units: list[Unit]) -> list[list[CallOutcome]]:
        if self._local_verifiers is None:
            self._local_verifiers = build_verifiers(self._specs)
        return run_units(self._local_verifiers, self._policies, units)

    def _check_picklable(self, num_workers: int) -> None:
        if num_workers == 0:
            return
        for name, spec in self._specs.items():
            try:
                pickle.dumps(spec)
            except Exception as exc:
                raise ValueError(
                    f"verifier {name!r}: its class and config must be picklable to run in worker "
                    f"processes (define them at module level): {type(exc).__name__}: {exc}"
                ) from exc

