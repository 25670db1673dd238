"""Async verifiers of the scoring runtime: run on the event loop of the scorer's process.

A verifier whose ``score`` (or ``score_batch``) is ``async def`` usually waits on something
outside the process -- an LLM judge over HTTP -- so it gains nothing from a worker process and
needs many calls in flight. Every unit (one call, or one batch) becomes a task; the per-call
time limit is enforced by cancelling the task (``asyncio.timeout``). Instances are built on
first use, in this process, and closed with their ``aclose()`` when the scorer closes.

A verifier that blocks the event loop instead of awaiting is named by a watchdog
(:mod:`grpo_run.core.scoring.loop_watchdog`) while it blocks, and a call that held the loop longer
than its time limit stops the run with a :class:`RunError` once it returns: such a call cannot be
cancelled, and it stalls everything else.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog

from grpo_run.core.errors import RunError
from grpo_run.core.plugins.abilities import AsyncClosable
from grpo_run.core.scoring.loop_watchdog import LoopWatchdog, StepMonitor, Tracked
from grpo_run.core.scoring.policy import VerifierPolicy
from grpo_run.core.scoring.workers import (
    CallOutcome,
    Unit,
    VerifierSpecs,
    batch_items,
    batch_results,
    describe_exception,
    failed_outcomes,
    outcomes_of,
)

logger = structlog.get_logger()

BLOCKED_WARN_S = 2.0
"""The watchdog warns once a verifier has held the event loop this long (or its time limit, if shorter)."""


class AsyncVerifiers:
    """The async verifiers of one scorer, built lazily and run as cancellable tasks."""

    def __init__(
        self,
        specs: VerifierSpecs,
        policies: Mapping[str, VerifierPolicy],
        timeout_s: float,
        *,
        on_unit: Callable[[Unit, list[CallOutcome]], None] | None = None,
    ) -> None:
        self._specs = specs
        self._policies = policies
        self._timeout_s = timeout_s
        self._instances: dict[str, Any] | None = None
        self._on_unit = on_unit
        self.warning_sink: Callable[[str], None] | None = None
        """Also shows the watchdog's warning (the run points it at the console); it is always logged."""
        self.monitor = StepMonitor()
        self._watchdog: LoopWatchdog | None = None
        self._blocking: str | None = None
        """Set once a call blocked the loop past its limit: no further call starts."""

    def _verifiers(self) -> dict[str, Any]:
        if self._instances is None:  # no await in between: safe under concurrent score() calls
            instances = {}
            for name, (cls, config) in self._specs.items():
                try:
                    instances[name] = cls(config)
                except Exception as exc:  # a broken setup stops the run with a message, not a traceback
                    raise RunError(f"verifier {name!r} could not be built: {describe_exception(exc)}") from exc
            self._instances = instances
            if self._watchdog is None:
                warn_after = min(self._timeout_s, BLOCKED_WARN_S)
                self._watchdog = LoopWatchdog(self.monitor, warn_after, self._report_blocked)
        return self._instances

    def _report_blocked(self, text: str) -> None:
        logger.warning("event loop blocked", detail=text)
        if self.warning_sink is not None:
            self.warning_sink(text)

    async def run(self, units: Sequence[Unit]) -> list[list[CallOutcome]]:
        """Run every unit concurrently; one outcome list per unit, in order (no unit: nothing is built)."""
        if not units:
            return []
        verifiers = self._verifiers()
        return list(await asyncio.gather(*(self._run_unit(verifiers[u[0].verifier], u) for u in units)))

    async def _run_unit(self, verifier: Any, unit: Unit) -> list[CallOutcome]:
        outcomes = await self._call(verifier, unit)
        if self._on_unit is not None:
            self._on_unit(unit, outcomes)
        return outcomes

    async def _call(self, verifier: Any, unit: Unit) -> list[CallOutcome]:
        if self._blocking is not None:  # calls queued behind a blocking one must not block too
            raise RunError(self._blocking)
        name = unit[0].verifier
        policy = self._policies[name]
        limit = self._timeout_s * len(unit)
        what = "timed out" if len(unit) == 1 else f"batch of {len(unit)} timed out"
        start = time.perf_counter()
        deadline = asyncio.timeout(limit)
        tracked: Tracked | None = None
        try:
            async with deadline:
                if policy.batched:
                    tracked = Tracked(verifier.score_batch(batch_items(unit)), name, self.monitor)
                    results = batch_results(await tracked, len(unit))
                else:
                    call = unit[0]
                    tracked = Tracked(verifier.score(call.completion, call.ground_truth, call.row), name, self.monitor)
                    results = [await tracked]
        except (Exception, KeyboardInterrupt, SystemExit) as exc:  # isolation: a verifier bug costs
            # rewards, never the run (a real Ctrl-C is a signal handled by the run, not raised here)
            if isinstance(exc, TimeoutError) and deadline.expired():
                return failed_outcomes(len(unit), self._timeout_s, f"{what} after {limit:g}s (cancelled)", timed_out=True)
            return failed_outcomes(len(unit), (time.perf_counter() - start) / len(unit), describe_exception(exc))
        if tracked is not None and tracked.blocked_s > limit:  # asyncio.timeout could not fire meanwhile
            self._blocking = (
                f"async verifier {name!r} blocked the event loop for {tracked.blocked_s:.1f} s in one call "
                f"(over its {limit:g} s limit, scoring.timeout_s): a blocking call inside `async def score` "
                f"stalls generation, training and every other verifier, and cannot be cancelled. Use an "
                f"async client, or make `score` a plain def so it runs in a killable worker process"
            )
            raise RunError(self._blocking)
        return outcomes_of(results, (time.perf_counter() - start) / len(unit), policy)

    async def aclose(self) -> None:
        """Await ``aclose()`` of every built verifier that has one; failures are logged."""
        instances, self._instances = self._instances, None
        if self._watchdog is not None:
            self._watchdog.close()
            self._watchdog = None
        for name, verifier in (instances or {}).items():
            if not isinstance(verifier, AsyncClosable):
                continue
            try:
                await verifier.aclose()
            except Exception as exc:  # shutting down: report, keep closing the rest
                logger.warning("verifier aclose failed", verifier=name, error=describe_exception(exc))

    def close_outside_loop(self) -> None:
        """:meth:`aclose` from synchronous code: on a fresh loop, or in the background of the
        running one (closed from inside a loop without ``aclose()``)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        try:
            if loop is None:
                asyncio.run(self.aclose())
            else:
                self._closing = loop.create_task(self.aclose())
        except Exception as exc:  # shutting down: report, keep closing the rest
            logger.warning("closing async verifiers failed", error=f"{type(exc).__name__}: {exc}")

    @property
    def built(self) -> bool:
        return self._instances is not None
