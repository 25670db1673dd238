"""Async verifiers of the scoring runtime: run on the event loop of the scorer's process.

A verifier whose ``score`` (or ``score_batch``) is ``async def`` usually waits on something
outside the process -- an LLM judge over HTTP -- so it gains nothing from a worker process and
needs many calls in flight. Every unit (one call, or one batch) becomes a task; the per-call
time limit is enforced by cancelling the task (``asyncio.timeout``). Instances are built on
first use, in this process, and closed with their ``aclose()`` when the scorer closes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

import structlog

from grpo_run.core.errors import RunError
from grpo_run.core.plugins.abilities import AsyncClosable
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


class AsyncVerifiers:
    """The async verifiers of one scorer, built lazily and run as cancellable tasks."""

    def __init__(self, specs: VerifierSpecs, policies: Mapping[str, VerifierPolicy], timeout_s: float) -> None:
        self._specs = specs
        self._policies = policies
        self._timeout_s = timeout_s
        self._instances: dict[str, Any] | None = None

    def _verifiers(self) -> dict[str, Any]:
        if self._instances is None:  # no await in between: safe under concurrent score() calls
            instances = {}
            for name, (cls, config) in self._specs.items():
                try:
                    instances[name] = cls(config)
                except Exception as exc:  # a broken setup stops the run with a message, not a traceback
                    raise RunError(f"verifier {name!r} could not be built: {describe_exception(exc)}") from exc
            self._instances = instances
        return self._instances

    async def run(self, units: Sequence[Unit]) -> list[list[CallOutcome]]:
        """Run every unit concurrently; one outcome list per unit, in order."""
        verifiers = self._verifiers()
        return list(await asyncio.gather(*(self._run_unit(verifiers[u[0].verifier], u) for u in units)))

    async def _run_unit(self, verifier: Any, unit: Unit) -> list[CallOutcome]:
        policy = self._policies[unit[0].verifier]
        limit = self._timeout_s * len(unit)
        start = time.perf_counter()
        deadline = asyncio.timeout(limit)
        try:
            async with deadline:
                if policy.batched:
                    results = batch_results(await verifier.score_batch(batch_items(unit)), len(unit))
                else:
                    call = unit[0]
                    results = [await verifier.score(call.completion, call.ground_truth, call.row)]
        except Exception as exc:  # isolation: a verifier bug costs rewards, never the run
            if isinstance(exc, TimeoutError) and deadline.expired():
                what = "timed out" if len(unit) == 1 else f"batch of {len(unit)} timed out"
                error = f"{what} after {limit:g}s (cancelled)"
                return failed_outcomes(len(unit), self._timeout_s, error, timed_out=True)
            return failed_outcomes(len(unit), (time.perf_counter() - start) / len(unit), describe_exception(exc))
        return outcomes_of(results, (time.perf_counter() - start) / len(unit), policy)

    async def aclose(self) -> None:
        """Await ``aclose()`` of every built verifier that has one; failures are logged."""
        instances, self._instances = self._instances, None
        for name, verifier in (instances or {}).items():
            if not isinstance(verifier, AsyncClosable):
                continue
            try:
                await verifier.aclose()
            except Exception as exc:  # shutting down: report, keep closing the rest
                logger.warning("verifier aclose failed", verifier=name, error=describe_exception(exc))

    @property
    def built(self) -> bool:
        return self._instances is not None
