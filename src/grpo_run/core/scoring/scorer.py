"""The scoring seam of the training loop: completions in, weighted rewards out (loop step 3).

:class:`RewardScorer` applies the verifiers each row names to its completion. Sync verifiers run
in worker processes (``spawn``), in chunks, so CPU-bound checks do not hold the training
process's GIL and a hung verifier can be killed; async verifiers (``async def score``) run as
cancellable tasks on the caller's event loop. Every call is isolated: a timeout, an exception or a
malformed return value gives that verifier a score of 0 and is counted (and the first few logged
with the row id); it never fails the batch. Only a verifier that keeps failing -- more than
``max_error_rate`` of its recent calls, or timeouts on ``max_consecutive_timeouts`` different
rows in a row (:mod:`~grpo_run.core.scoring.guards`) -- stops the run, with a :class:`RunError`.

A row is a mapping with ``id``, ``ground_truth`` and ``verifier``: one name, or a list of names
with ``ground_truth`` a list of the same length (one gold per verifier). Verifiers whose config
has ``all_rows`` (``format``, ``length``, ``non_stop_penalty``) score every row as well.

Combining a row's results (see :class:`ScoredCompletion`)::

    reward = verification_reward * sum(weight * score)     over applicable additive verifiers
    reward = min(gate_fail_reward)                          instead, if an applicable gate failed

:meth:`RewardScorer.score` may be called from several tasks of one event loop at once (groups
scored as they complete); the calls share the workers.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import structlog

from grpo_run.core.errors import PluginError
from grpo_run.core.plugins.types import FINISH_REASON_KEY, NUM_TOKENS_KEY, reaches
from grpo_run.core.scoring.async_verifiers import AsyncVerifiers
from grpo_run.core.scoring.correctness import Correctness, Verdict
from grpo_run.core.scoring.guards import TimeoutStreak
from grpo_run.core.scoring.metrics import ErrorRateGuard, ScoringMetrics
from grpo_run.core.scoring.planning import group_units, interleave_rows, plan_row
from grpo_run.core.scoring.policy import VerifierPolicy, max_possible_score
from grpo_run.core.scoring.pools import build_sync_pools
from grpo_run.core.scoring.rescaling import Rescalers
from grpo_run.core.scoring.results import ScoredBatch, ScoredCompletion
from grpo_run.core.scoring.sync_verifiers import SyncVerifiers
from grpo_run.core.scoring.worker_process import CANCELLED
from grpo_run.core.scoring.workers import CallOutcome, Unit, VerifierCall, VerifierSpecs, build_policies

if TYPE_CHECKING:
    from grpo_run.core.config.schema import ScoringSection

logger = structlog.get_logger()


@attrs.frozen
class _Planned:
    """Row number ``row`` asks ``verifier`` for a score (one per dispatched call)."""

    row: int
    verifier: str


class RewardScorer:
    """Scores completions with the enabled verifiers, each call isolated.

    :param verifiers: enabled verifiers, ``name -> (class, config)``; the name is what rows use.
        Sync verifiers' classes and configs must be picklable (module level) to reach the workers.
    :param num_workers: worker processes for sync verifiers; 0 runs them in a thread of this
        process (debugging: no time limit is enforced there).
    :param timeout_s: per-call time limit; an overrunning sync call's worker is killed and
        replaced, an overrunning async call is cancelled. A batch of n calls gets n times it.
    :param default_verifier: verifier for rows without a ``verifier`` key.
    :param chunk_size: calls per worker message; by default sized to give each worker ~4 chunks.
    :param max_logged_errors: failed calls logged per verifier (all are counted).
    :param verification_reward: multiplies every additive reward (and the maxima); must be > 0.
    :param max_error_rate: a verifier whose errors and timeouts exceed this share of its last
        ``error_window`` calls (once it has had ``error_min_calls``) makes :meth:`score` raise
        :class:`~grpo_run.core.errors.RunError`; 1.0 (the default here) disables the check.
    :param max_consecutive_timeouts: a verifier whose calls timed out on this many different rows
        in a row stops the run at once (see :mod:`~grpo_run.core.scoring.guards`); 0 (the
        default here) disables the check.
    :param max_calls_per_worker: replace a worker process after it served this many calls (0: never).
    :param max_worker_rss_mb: replace a worker process whose resident memory exceeds this after
        a chunk (0: never) -- what keeps a leaking verifier from eating the machine.
    :param sync_pool: what runs the sync verifiers, called with :class:`SyncVerifiers`'
        arguments (default: :class:`SyncVerifiers`, worker processes of this process; a Ray
        placement passes its scoring actors).
    :param correctness_verifiers: which verifiers decide whether a completion is solved
        (``ScoredCompletion.solved``): ``"auto"``, ``"reward"`` or verifier names
        (:mod:`~grpo_run.core.scoring.correctness`).
    :param own_pool: what runs a verifier that asks for a worker of its own
        (:class:`~grpo_run.OwnWorker`), called like ``sync_pool`` plus ``resources=`` (default: one
        worker process of this process; a Ray placement passes an actor of its own).

    Workers start on the first :meth:`score` (or :meth:`start`). Call :meth:`close` (or, inside
    the event loop, ``await`` :meth:`aclose`) when done. Use one event loop for all calls.
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
        verification_reward: float = 1.0,
        max_error_rate: float = 1.0,
        error_window: int = 200,
        error_min_calls: int = 50,
        max_consecutive_timeouts: int = 0,
        max_calls_per_worker: int = 0,
        max_worker_rss_mb: float = 0.0,
        sync_pool: Callable[..., SyncVerifiers] | None = None,
        own_pool: Callable[..., Any] | None = None,
        row_verifiers: bool = True,
        correctness_verifiers: str | Sequence[str] = "auto",
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
        if not (verification_reward > 0 and math.isfinite(verification_reward)):
            raise ValueError(f"verification_reward must be a finite number > 0, got {verification_reward}")
        self._specs: VerifierSpecs = dict(verifiers)
        try:
            self._policies: dict[str, VerifierPolicy] = build_policies(self._specs)
        except ValueError as exc:  # a verifier's declared range, weight or mode: said in one line
            raise PluginError(str(exc)) from None
        sync_specs = {n: spec for n, spec in self._specs.items() if not self._policies[n].is_async}
        async_specs = {n: spec for n, spec in self._specs.items() if self._policies[n].is_async}
        self._all_rows = [name for name, policy in self._policies.items() if policy.all_rows]
        self._streak = TimeoutStreak(max_consecutive_timeouts, timeout_s)
        pool = sync_pool if sync_pool is not None and sync_specs and num_workers > 0 else SyncVerifiers
        self._sync = build_sync_pools(
            sync_specs, self._policies, num_workers if sync_specs else 0, timeout_s, chunk_size, shared=pool,
            own=own_pool, max_calls_per_worker=max_calls_per_worker, max_worker_rss_mb=max_worker_rss_mb,
            on_unit=self._heard,
        )
        self._rescalers = Rescalers(self._specs, self._policies)
        try:
            self.correctness = Correctness(self._policies, correctness_verifiers)
        except ValueError as exc:
            raise PluginError(str(exc)) from None
        self._streak.on_trip = self._sync.abort
        self.num_workers = self._sync.num_workers
        self.timeout_s = timeout_s
        self.default_verifier = default_verifier
        self.row_verifiers = row_verifiers
        self.max_logged_errors = max_logged_errors
        self.verification_reward = float(verification_reward)
        self._score_tops = {name: policy.score_range[1] for name, policy in self._policies.items()}
        self._guard = ErrorRateGuard(max_error_rate, error_window, min(error_min_calls, error_window))
        self._logged: dict[str, int] = {}
        self._async = AsyncVerifiers(async_specs, self._policies, timeout_s, on_unit=self._heard)
        self._closed = False
        logger.info(
            "reward scale",
            max_possible_score=self.max_possible_score,
            verification_reward=self.verification_reward,
            solved_by=self.correctness.describe(),
            verifiers={n: ("gate" if p.gate else "additive") + (", all rows" if p.all_rows else "")
                       for n, p in self._policies.items()},
        )

    @classmethod
    def from_config(
        cls,
        scoring: ScoringSection,
        verifiers: Mapping[str, tuple[type, Any]],
        *,
        default_verifier: str | None = None,
        **overrides: Any,
    ) -> RewardScorer:
        """A scorer configured by a ``[scoring]`` section; ``overrides`` replace single arguments."""
        kwargs: dict[str, Any] = attrs.asdict(scoring, recurse=False)  # its fields are arguments of __init__
        kwargs.update(overrides)
        return cls(verifiers, default_verifier=default_verifier, **kwargs)

    @property
    def enabled(self) -> list[str]:
        """Names of the enabled verifiers."""
        return list(self._specs)

    @property
    def policies(self) -> Mapping[str, VerifierPolicy]:
        """How each enabled verifier is run and combined."""
        return dict(self._policies)

    @property
    def max_possible_score(self) -> float:
        """The most a row naming one verifier can score (see :func:`scoring_policy.max_possible_score`)."""
        return max_possible_score(self._policies, self.verification_reward)

    def row_max_score(self, row: Mapping[str, Any]) -> float:
        """The most ``row`` can score if all its verifiers apply (the ``max_reward`` it would get)."""
        return self.verification_reward * sum(self._policies[n].max_contribution for n in self._row_verifiers(row))

    def can_solve(self, row: Mapping[str, Any]) -> bool:
        """Whether a completion of ``row`` can ever count as solved (see :attr:`correctness`)."""
        return self.correctness.can_solve(self._row_verifiers(row), self.row_max_score(row))

    def _row_verifiers(self, row: Mapping[str, Any]) -> list[str]:
        return [name for name, _ in plan_row(row, self.default_verifier, self._specs, self._all_rows, [], self.row_verifiers)]

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of the worker processes alive now (workers start lazily)."""
        return self._sync.worker_pids

    @property
    def workers_recycled(self) -> int:
        """Worker processes replaced so far for ``max_calls_per_worker`` / ``max_worker_rss_mb``."""
        return self._sync.recycled

    def loop_held(self) -> tuple[str, float] | None:
        """The async verifier holding the event loop right now and for how long (any thread)."""
        held = self._async.monitor.held()
        return None if held is None else (f"async verifier {held[0]!r}", held[1])

    def count_loop_holds(self, count: Callable[[str, float], None]) -> None:
        """``count(name, seconds)`` each time an async verifier held the event loop (a blocking call)."""
        self._async.monitor.on_hold = lambda name, seconds: count(f"async verifier {name!r}", seconds)

    def show_warnings_with(self, sink: Callable[[str], None]) -> None:
        """Also show runtime warnings meant for a person (an async verifier blocking the event
        loop) through ``sink``, e.g. the run's console; they are always logged."""
        self._async.warning_sink = sink

    def start(self) -> None:
        """Start every worker now (in parallel) instead of on the first :meth:`score`."""
        self._sync.start()

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps (and ``load_state_dict`` restores): rescalers' running state."""
        return self._rescalers.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._rescalers.load_state_dict(state)

    def placement(self) -> list[dict[str, Any]]:
        """Where each verifier runs: ``{"verifiers", "where", ...}`` per pool (``pipeline.json``)."""
        on_loop = [n for n, p in self._policies.items() if p.is_async]
        here = [{"verifiers": on_loop, "where": "training process (event loop)"}] if on_loop else []
        return [*self._sync.describe(), *here]

    async def score(
        self,
        rows: Sequence[Mapping[str, Any]],
        completions: Sequence[str],
        finish_reasons: Sequence[str] | None = None,
        num_tokens: Sequence[int] | None = None,
        *,
        training: bool = True,
    ) -> ScoredBatch:
        """Score ``completions[i]`` against ``rows[i]``; never blocks the event loop.

        ``finish_reasons[i]`` / ``num_tokens[i]``, when given, reach the verifiers in the row
        mapping under ``"finish_reason"`` / ``"num_tokens"``. ``training=False`` (evaluations):
        rescaled verifiers' running statistics are used, not updated. Returns the results in order, with
        the metrics of *this* call (so concurrent calls -- groups of several batches in flight,
        an evaluation -- never mix their statistics). Failures are logged and count toward the
        error-rate limit: raises :class:`~grpo_run.core.errors.RunError` when a verifier's error
        rate is over it.
        """
        if self._closed:
            raise RuntimeError("RewardScorer.score() called after close()")
        self._streak.check()
        per_row = (("completions", completions), ("finish_reasons", finish_reasons), ("num_tokens", num_tokens))
        for label, values in per_row:
            if values is not None and len(values) != len(rows):
                raise ValueError(f"{len(rows)} rows but {len(values)} {label}")
        stats = ScoringMetrics(self._score_tops)
        planned: list[_Planned] = []
        calls: list[VerifierCall] = []
        row_errors: list[list[str]] = [[] for _ in rows]
        for i, (row, completion) in enumerate(zip(rows, completions, strict=True)):
            extra = {}
            if finish_reasons is not None:
                extra[FINISH_REASON_KEY] = finish_reasons[i]
            if num_tokens is not None:
                extra[NUM_TOKENS_KEY] = num_tokens[i]
            for name, gold in plan_row(row, self.default_verifier, self._specs, self._all_rows, row_errors[i],
                                       self.row_verifiers):
                planned.append(_Planned(i, name))
                calls.append(VerifierCall(name, completion, gold, {**row, **extra}))
            if row_errors[i]:
                stats.add_row_error()
                self._log_failure("row cannot be fully scored", None, row, "; ".join(row_errors[i]))
        outcomes = self._rescalers.apply(calls, await self._run(calls), training) if calls else []
        self._streak.check()
        results = self._combine(rows, planned, outcomes, row_errors, stats)
        gated = sum(r.gated for r in results)
        stats.add_rows(len(results), gated)
        if gated == len(results) > 1:
            hint = "check that the prompts ask for what the gating verifiers require"
            self._log_failure("every row failed a gate: all rewards are a gate_fail_reward", "<gates>", rows[0], hint)
        self._guard.check()
        return ScoredBatch(results, stats)

    async def aclose(self) -> None:
        """Close from inside the event loop: await the async verifiers' ``aclose()``, then :meth:`close`."""
        await self._async.aclose()
        self.close()

    def close(self) -> None:
        """Stop and reap every worker process and close async verifiers. Idempotent; not while a
        :meth:`score` runs. Prefer :meth:`aclose` when the async verifiers hold loop resources."""
        if self._closed:
            return
        self._closed = True
        if self._async.built:
            self._async.close_outside_loop()
        self._sync.close()

    def __enter__(self) -> RewardScorer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- combining -----------------------------------------------------------------------------

    def _combine(
        self,
        rows: Sequence[Mapping[str, Any]],
        planned: list[_Planned],
        outcomes: list[CallOutcome],
        row_errors: list[list[str]],
        metrics: ScoringMetrics,
    ) -> list[ScoredCompletion]:
        additive = [0.0] * len(rows)
        maxima = [0.0] * len(rows)
        gate_rewards: list[float | None] = [None] * len(rows)
        scores: list[dict[str, float]] = [{} for _ in rows]
        verdicts: list[list[Verdict]] = [[] for _ in rows]
        for plan, outcome in zip(planned, outcomes, strict=True):
            row = rows[plan.row]
            metrics.add(plan.verifier, outcome)
            if outcome.error == CANCELLED:  # the scorer is stopping: not the verifier's failure
                row_errors[plan.row].append(f"{plan.verifier}: {outcome.error}")
                continue
            self._guard.add(plan.verifier, outcome, row.get("id"))
            if outcome.error is not None:
                row_errors[plan.row].append(f"{plan.verifier}: {outcome.error}")
                event = "verifier timed out" if outcome.timed_out else "verifier failed"
                self._log_failure(event, plan.verifier, row, outcome.error)
            if not outcome.applicable:
                continue
            policy = self._policies[plan.verifier]
            scores[plan.row][plan.verifier] = outcome.score
            if plan.verifier in self.correctness.judges:
                verdicts[plan.row].append(Verdict(outcome.score, policy.score_range[1], outcome.error is not None))
            if not policy.gate:
                additive[plan.row] += policy.weight * outcome.score
                maxima[plan.row] += policy.max_contribution
            elif outcome.error is not None or not reaches(outcome.score, policy.score_range[1]):
                current = gate_rewards[plan.row]
                fail = policy.gate_fail_reward
                gate_rewards[plan.row] = fail if current is None else min(current, fail)
        scale = self.verification_reward
        out = []
        for a, m, g, s, e, v in zip(additive, maxima, gate_rewards, scores, row_errors, verdicts, strict=True):
            reward, max_reward = scale * a if g is None else g, scale * m
            out.append(ScoredCompletion(
                reward=reward, max_reward=max_reward, scores=s, error="; ".join(e) if e else None,
                gated=g is not None, solved=self.correctness.solved(v, reward, max_reward),
            ))
        return out

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

    def _heard(self, unit: Unit, outcomes: list[CallOutcome]) -> None:
        """A unit's outcomes are known (called from driver threads too): feed the timeout guard."""
        for call, outcome in zip(unit, outcomes, strict=True):
            if outcome.error != CANCELLED:
                self._streak.record(call.verifier, call.row.get("id"), outcome.timed_out)

    async def _run(self, calls: list[VerifierCall]) -> list[CallOutcome]:
        """Outcomes of ``calls`` in order: sync ones in workers, async ones here, concurrently."""
        sync_idx = interleave_rows(calls, [i for i, c in enumerate(calls) if not self._policies[c.verifier].is_async])
        async_idx = [i for i, c in enumerate(calls) if self._policies[c.verifier].is_async]
        sync_units = group_units(calls, sync_idx, max(1, self.num_workers), self._policies)
        async_units = group_units(calls, async_idx, 1, self._policies)
        sync_done, async_done = await asyncio.gather(
            self._sync.run([[calls[i] for i in u] for u in sync_units]),
            self._async.run([[calls[i] for i in u] for u in async_units]),
        )
        outcomes: list[CallOutcome] = [None] * len(calls)  # type: ignore[list-item]
        for units, done in ((sync_units, sync_done), (async_units, async_done)):
            for unit, unit_outcomes in zip(units, done, strict=True):
                for i, outcome in zip(unit, unit_outcomes, strict=True):
                    outcomes[i] = outcome
        return outcomes
