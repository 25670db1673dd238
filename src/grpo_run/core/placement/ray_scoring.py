"""Scoring workers on a Ray cluster (``distributed.scoring_actors > 0``).

Each :class:`ScoringActor` hosts a :class:`~grpo_run.core.scoring.sync_verifiers.SyncVerifiers`
on the node Ray puts it on: ``scoring.num_workers`` killable worker processes with the same time
limits, recycling and single-owner rule as on the driver. The driver side,
:class:`RaySyncVerifiers`, has the interface the scorer uses (``run``, ``start``, ``abort``,
``close``) and splits each call's units across the actors; timeouts and errors per unit come back
as outcomes, so the scorer's guards (error rate, consecutive timeouts) see them as before. Async
verifiers still run on the driver's event loop (they wait on I/O, not on CPUs).

An actor that dies ends the run with an error naming it; verifiers that cannot start on an actor's
node fail the run as they would locally.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from grpo_run.core.config.processes import ActorResources, actor_resources
from grpo_run.core.errors import RunError, UserError
from grpo_run.core.placement.ray_actors import describe_actor, placed, where_am_i
from grpo_run.core.runlog import get_logger
from grpo_run.core.scoring.policy import VerifierPolicy
from grpo_run.core.scoring.sync_verifiers import SyncVerifiers, UnitListener
from grpo_run.core.scoring.workers import CallOutcome, Unit, VerifierSpecs


class ScoringActor:
    """A pool of scoring worker processes on one node (an async Ray actor)."""

    def __init__(self, specs: VerifierSpecs, policies: Mapping[str, VerifierPolicy], num_workers: int,
                 timeout_s: float, chunk_size: int | None, max_calls_per_worker: int,
                 max_worker_rss_mb: float) -> None:
        self.pool = SyncVerifiers(specs, policies, num_workers, timeout_s, chunk_size,
                                  max_calls_per_worker=max_calls_per_worker, max_worker_rss_mb=max_worker_rss_mb)

    async def start(self) -> dict[str, Any]:
        """Start the worker processes (verifiers built in each); where this actor runs."""
        await asyncio.to_thread(self.pool.start)
        return {**where_am_i(), "worker_pids": self.pool.worker_pids}

    async def run(self, units: list[Unit]) -> list[list[CallOutcome]]:
        return await self.pool.run(units)

    async def abort(self, reason: str) -> None:
        self.pool.abort(reason)

    async def recycled(self) -> int:
        return self.pool.recycled

    async def close(self) -> None:
        await asyncio.to_thread(self.pool.close)


class RaySyncVerifiers:
    """The driver's view of ``num_actors`` :class:`ScoringActor` pools (the scorer's sync verifiers)."""

    def __init__(
        self,
        specs: VerifierSpecs,
        policies: Mapping[str, VerifierPolicy],
        num_workers: int,
        timeout_s: float,
        chunk_size: int | None,
        *,
        num_actors: int,
        resources: ActorResources,
        startup_timeout_s: float,
        max_calls_per_worker: int = 0,
        max_worker_rss_mb: float = 0.0,
        on_unit: UnitListener | None = None,
    ) -> None:
        if num_workers < 1:
            raise ValueError("scoring actors need scoring.num_workers >= 1 (worker processes in each actor)")
        self.num_workers = num_workers * num_actors
        self._on_unit = on_unit
        self._startup_timeout_s = startup_timeout_s
        self._abort_reason: str | None = None
        options: dict[str, Any] = {"num_cpus": resources.num_cpus, "num_gpus": resources.num_gpus}
        if resources.resources:
            options["resources"] = dict(resources.resources)
        self._resources = options
        self._verifiers = list(specs)
        actor_cls = ray.remote(ScoringActor)
        self._actors = [
            actor_cls.options(**options).remote(specs, dict(policies), num_workers, timeout_s, chunk_size,
                                                max_calls_per_worker, max_worker_rss_mb)
            for _ in range(num_actors)
        ]
        self._where: list[dict[str, Any]] | None = None

    @property
    def actors(self) -> list[dict[str, Any]]:
        """Where each started actor runs (``actor_id``, ``pid``, ``host``, ``worker_pids``)."""
        return list(self._where or [])

    @property
    def worker_pids(self) -> list[int]:
        """The worker processes' pids (on their actors' nodes)."""
        return [pid for where in self._where or [] for pid in where["worker_pids"]]

    @property
    def recycled(self) -> int:
        """Workers replaced on all actors (``max_calls_per_worker`` / ``max_worker_rss_mb``)."""
        return sum(ray.get([a.recycled.remote() for a in self._actors], timeout=30))

    def describe(self) -> list[dict[str, Any]]:
        """Where these verifiers run (the run's ``pipeline.json``): the actors, their resources."""
        actors = [{"actor_id": str(w["actor_id"]), "pid": w["pid"], "host": w["host"], "worker_pids": w["worker_pids"]}
                  for w in self._where or []]
        return [{"verifiers": self._verifiers, "where": "ray actors", "resources": self._resources, "actors": actors}]

    def start(self) -> None:
        """Start every actor's workers; waits until all are ready (at most ``startup_timeout_s``)."""
        if self._where is not None:
            return
        try:
            self._where = ray.get([a.start.remote() for a in self._actors], timeout=self._startup_timeout_s)
        except GetTimeoutError:
            raise RunError(
                f"scoring actors not running after {self._startup_timeout_s:g} s: each asks for "
                f"{self._resources}; available now: {ray.available_resources()} "
                "(change distributed.scoring_resources or add nodes)"
            ) from None
        except RayTaskError as exc:
            raise _cause(exc) from None
        except RayActorError as exc:
            raise RunError(f"a scoring actor could not start: {exc}") from None
        get_logger().info("scoring_actors_started", actors=[
            {"actor": i, "host": w["host"], **placed(w), "workers": len(w["worker_pids"])}
            for i, w in enumerate(self._where)
        ])

    async def run(self, units: list[Unit]) -> list[list[CallOutcome]]:
        """One outcome list per unit, in order: contiguous shares of the units, one per actor."""
        if not units:
            return []
        if self._abort_reason is not None:
            raise RunError(self._abort_reason)
        if self._where is None:
            await asyncio.to_thread(self.start)
        per_actor = -(-len(units) // len(self._actors))
        shares = [(i, units[s : s + per_actor]) for i, s in enumerate(range(0, len(units), per_actor))]
        results = await asyncio.gather(*(self._run_on(i, share) for i, share in shares))
        outcomes = [unit_outcomes for share in results for unit_outcomes in share]
        if self._on_unit is not None:
            for unit, unit_outcomes in zip(units, outcomes, strict=True):
                self._on_unit(unit, unit_outcomes)
        return outcomes

    async def _run_on(self, index: int, units: list[Unit]) -> list[list[CallOutcome]]:
        try:
            return await self._actors[index].run.remote(units)
        except RayActorError as exc:
            where = (self._where or [{}])[index] if self._where else {}
            who = describe_actor(where) if where else "not started"
            raise RunError(
                f"scoring actor {index} ({who}) died while scoring; the run stops (checkpoints written before are intact)"
            ) from exc
        except RayTaskError as exc:
            raise _cause(exc) from None

    def abort(self, reason: str) -> None:
        """Stop every call in flight (each actor kills its workers); later calls fail with ``reason``."""
        self._abort_reason = reason
        for actor in self._actors:
            actor.abort.remote(reason)

    def close(self) -> None:
        """Stop the actors' workers, then the actors."""
        try:
            ray.get([a.close.remote() for a in self._actors], timeout=15)
        except Exception:  # noqa: BLE001 - shutting down: the actors go either way
            pass
        for actor in self._actors:
            ray.kill(actor)


def own_actor_pool(specs: VerifierSpecs, policies: Mapping[str, VerifierPolicy], num_workers: int,
                   timeout_s: float, chunk_size: int | None, *, resources: Mapping[str, float],
                   startup_timeout_s: float, **kwargs: Any) -> RaySyncVerifiers:
    """A verifier's own pool (:class:`~grpo_run.OwnWorker`): one actor with the resources its
    config names, holding ``num_workers`` worker processes (the GPUs Ray gives the actor are
    visible to them too: they inherit its ``CUDA_VISIBLE_DEVICES``)."""
    return RaySyncVerifiers(specs, policies, num_workers, timeout_s, chunk_size, num_actors=1,
                            resources=actor_resources(resources), startup_timeout_s=startup_timeout_s, **kwargs)


def _cause(exc: RayTaskError) -> BaseException:
    """The error raised inside the actor: ours as it was (one line for the user), others wrapped."""
    cause = exc.cause
    return cause if isinstance(cause, (RunError, UserError)) else exc.as_instanceof_cause()
