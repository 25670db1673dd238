"""The scoring seam of the training loop: completions in, weighted rewards out (loop step 3).

:class:`RewardScorer` applies the verifiers each row names to its completion. Calls run in
worker processes (``spawn``), in chunks, so CPU-bound checks do not hold the training process's
GIL and a hung verifier can be killed. Every call is isolated: a timeout, an exception or a
malformed return value gives that verifier a score of 0 and is counted (and the first few logged
with the row id); it never fails the batch.

A row is a mapping with ``id``, ``ground_truth`` and ``verifier``: one name, or a list of names
with ``ground_truth`` a list of the same length (one gold per verifier).
"""

from __future__ import annotations

import asyncio
import math
import pickle
import queue
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import attrs
import structlog

from grpo_run.core.scoring_metrics import ScoringMetrics
from grpo_run.core.scoring_workers import (
    CallOutcome,
    VerifierCall,
    VerifierSpecs,
    WorkerProcess,
    build_verifiers,
    run_calls,
)

logger = structlog.get_logger()

MAX_CHUNK = 64
"""Most calls sent to a worker in one message."""


@attrs.frozen
class ScoredCompletion:
    """The reward of one completion."""

    reward: float
    """Sum of ``weight x score`` over the applicable verifiers the row names."""
    max_reward: float
    """Sum of the weights of the enabled, applicable verifiers the row names."""
    scores: Mapping[str, float]
    """Unweighted score of each applicable verifier (0 for a failed call)."""
    error: str | None = None
    """Why some verifier gave no real score (timeout, exception, not enabled); None when all did."""


@attrs.frozen
class _Planned:
    """Row ``row`` asks verifier ``verifier`` (call ``call``) for a score."""

    row: int
    verifier: str


class RewardScorer:
    """Scores completions with the enabled verifiers, isolated in killable worker processes.

    :param verifiers: enabled verifiers, ``name -> (class, config)``; the name is what rows use.
        Classes and configs must be picklable (defined at module level) to reach the workers.
    :param num_workers: worker processes; 0 runs verifiers in a thread of this process
        (debugging: no time limit is enforced there).
    :param timeout_s: per-call time limit; an overrunning call's worker is killed and replaced.
    :param default_verifier: verifier for rows without a ``verifier`` key.
    :param chunk_size: calls per worker message; by default sized to give each worker ~4 chunks.
    :param max_logged_errors: failed calls logged per verifier (all are counted).

    Workers start on the first :meth:`score` (or :meth:`start`). Call :meth:`close` when done.
    """

    def __init__(
        self,
        verifiers: Mapping[str, tuple[type, Any]],
        *,
        num_workers: int = 1,
        timeout_s: float = 5.0,
        default_verifier: str | None = None,
        chunk_size: int | None = None,
        max_logged_errors: int = 5,
    ) -> None:
        if not verifiers:
            raise ValueError("RewardScorer needs at least one enabled verifier")
        if num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        if chunk_size is not None and chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        if default_verifier is not None and default_verifier not in verifiers:
            raise ValueError(f"default_verifier {default_verifier!r} is not enabled; enabled: {', '.join(verifiers)}")
        self._specs: VerifierSpecs = dict(verifiers)
        self._weights = {name: float(getattr(config, "weight", 1.0)) for name, (_, config) in self._specs.items()}
        self._check_picklable(num_workers)
        self.num_workers = num_workers
        self.timeout_s = timeout_s
        self.default_verifier = default_verifier
        self.chunk_size = chunk_size
        self.max_logged_errors = max_logged_errors
        self._metrics = ScoringMetrics()
        self._logged: dict[str, int] = {}
        self._local_verifiers: dict[str, Any] | None = None
        self._workers = [WorkerProcess(self._specs, timeout_s) for _ in range(num_workers)]
        self._idle: queue.SimpleQueue[WorkerProcess] = queue.SimpleQueue()
        for worker in self._workers:
            self._idle.put(worker)
        self._executor = ThreadPoolExecutor(max_workers=max(1, num_workers), thread_name_prefix="grpo-run-scoring")
        self._closed = False

    @property
    def enabled(self) -> list[str]:
        """Names of the enabled verifiers."""
        return list(self._specs)

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of the worker processes alive now (workers start lazily)."""
        return [pid for pid in (w.pid for w in self._workers) if pid is not None]

    def start(self) -> None:
        """Start every worker now (in parallel) instead of on the first :meth:`score`."""
        for worker in self._workers:
            worker.spawn()
        for worker in self._workers:
            worker.wait_ready()

    async def score(self, rows: Sequence[Mapping[str, Any]], completions: Sequence[str]) -> list[ScoredCompletion]:
        """Score ``completions[i]`` against ``rows[i]``; never blocks the event loop."""
        if self._closed:
            raise RuntimeError("RewardScorer.score() called after close()")
        if len(rows) != len(completions):
            raise ValueError(f"{len(rows)} rows but {len(completions)} completions")
        planned: list[_Planned] = []
        calls: list[VerifierCall] = []
        row_errors: list[list[str]] = [[] for _ in rows]
        for i, (row, completion) in enumerate(zip(rows, completions, strict=True)):
            for name, gold in self._plan_row(row, row_errors[i]):
                planned.append(_Planned(i, name))
                calls.append(VerifierCall(name, completion, gold, dict(row)))
            if row_errors[i]:
                self._metrics.add_row_error()
                self._log_failure("row cannot be fully scored", None, row, "; ".join(row_errors[i]))
        outcomes = await self._run(calls) if calls else []
        return self._combine(rows, planned, outcomes, row_errors)

    def pop_metrics(self) -> dict[str, float]:
        """Metrics since the last pop: ``verifier/<name>/{count, mean_score, correct_rate,
        latency_p50_ms, latency_p95_ms, errors, timeouts}`` for each verifier that had calls, its
        own ``VerifierResult.metrics`` averaged under the same prefix, and ``scoring/row_errors``."""
        return self._metrics.pop()

    def close(self) -> None:
        """Stop and reap every worker process. Idempotent; not while a :meth:`score` runs."""
        if self._closed:
            return
        self._closed = True
        for worker in self._workers:
            worker.close()
        self._executor.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> RewardScorer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- planning and combining ------------------------------------------------------------------

    def _plan_row(self, row: Mapping[str, Any], errors: list[str]) -> list[tuple[str, Any]]:
        """(verifier, ground truth) pairs for an enabled verifier the row names; problems go to ``errors``."""
        names = row.get("verifier", self.default_verifier)
        gold = row.get("ground_truth")
        if isinstance(names, str):
            pairs = [(names, gold)]
        elif isinstance(names, (list, tuple)) and all(isinstance(n, str) for n in names):
            if not (isinstance(gold, (list, tuple)) and len(gold) == len(names)):
                errors.append(f"verifier lists {len(names)} names, so ground_truth must be a list of {len(names)}")
                return []
            pairs = list(zip(names, gold, strict=True))
        else:
            errors.append(f"verifier must be a name or a list of names, got {names!r}")
            return []
        if len({name for name, _ in pairs}) != len(pairs):
            errors.append(f"verifier names a verifier twice: {names!r}")
            return []
        unknown = [name for name, _ in pairs if name not in self._specs]
        for name in unknown:
            errors.append(f"verifier {name!r} is not enabled; enabled: {', '.join(self._specs)}")
        return [(name, g) for name, g in pairs if name in self._specs]

    def _combine(
        self,
        rows: Sequence[Mapping[str, Any]],
        planned: list[_Planned],
        outcomes: list[CallOutcome],
        row_errors: list[list[str]],
    ) -> list[ScoredCompletion]:
        rewards = [0.0] * len(rows)
        max_rewards = [0.0] * len(rows)
        scores: list[dict[str, float]] = [{} for _ in rows]
        for plan, outcome in zip(planned, outcomes, strict=True):
            self._metrics.add(plan.verifier, outcome)
            if outcome.error is not None:
                row_errors[plan.row].append(f"{plan.verifier}: {outcome.error}")
                event = "verifier timed out" if outcome.timed_out else "verifier failed"
                self._log_failure(event, plan.verifier, rows[plan.row], outcome.error)
            if not outcome.applicable:
                continue
            weight = self._weights[plan.verifier]
            scores[plan.row][plan.verifier] = outcome.score
            rewards[plan.row] += weight * outcome.score
            max_rewards[plan.row] += weight
        return [
            ScoredCompletion(reward=r, max_reward=m, scores=s, error="; ".join(e) if e else None)
            for r, m, s, e in zip(rewards, max_rewards, scores, row_errors, strict=True)
        ]

    def _log_failure(self, event: str, verifier: str | None, row: Mapping[str, Any], error: str) -> None:
        """Log the first ``max_logged_errors`` failures of each verifier (and of row planning)."""
        key = verifier if verifier is not None else ""
        count = self._logged[key] = self._logged.get(key, 0) + 1
        if count > self.max_logged_errors:
            return
        if count == self.max_logged_errors:
            event += " (further failures are counted, not logged)"
        logger.warning(event, verifier=verifier, row_id=row.get("id"), error=error)

    # -- execution -----------------------------------------------------------------------------

    async def _run(self, calls: list[VerifierCall]) -> list[CallOutcome]:
        loop = asyncio.get_running_loop()
        if self.num_workers == 0:
            return await loop.run_in_executor(self._executor, self._run_local, calls)
        size = self.chunk_size or max(1, min(MAX_CHUNK, math.ceil(len(calls) / (4 * self.num_workers))))
        chunks: queue.SimpleQueue[tuple[int, list[VerifierCall]]] = queue.SimpleQueue()
        for start in range(0, len(calls), size):
            chunks.put((start, calls[start : start + size]))
        drainers = min(self.num_workers, math.ceil(len(calls) / size))
        done = await asyncio.gather(*(loop.run_in_executor(self._executor, self._drain, chunks) for _ in range(drainers)))
        outcomes: list[CallOutcome] = [None] * len(calls)  # type: ignore[list-item]
        for start, chunk_outcomes in (item for results in done for item in results):
            outcomes[start : start + len(chunk_outcomes)] = chunk_outcomes
        return outcomes

    def _drain(self, chunks: queue.SimpleQueue[tuple[int, list[VerifierCall]]]) -> list[tuple[int, list[CallOutcome]]]:
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

    def _run_local(self, calls: list[VerifierCall]) -> list[CallOutcome]:
        if self._local_verifiers is None:
            self._local_verifiers = build_verifiers(self._specs)
        return run_calls(self._local_verifiers, calls)

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
