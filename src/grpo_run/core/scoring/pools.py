"""Which pool of scoring workers runs each sync verifier.

Most sync verifiers share one pool (``scoring.num_workers`` worker processes, or Ray scoring
actors). A verifier whose config asks for a worker of its own (:class:`~grpo_run.OwnWorker`: a
reward model, loaded once) gets a pool of one worker process -- a Ray actor with the resources it
names under ``distributed.backend = "ray"``. :class:`RoutedPools` puts the pools behind the
interface the scorer uses, sending each unit to its verifier's pool.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from grpo_run.core.plugins.abilities import OwnWorker
from grpo_run.core.scoring.policy import VerifierPolicy
from grpo_run.core.scoring.sync_verifiers import SyncVerifiers
from grpo_run.core.scoring.workers import CallOutcome, Unit, VerifierSpecs

PoolFactory = Callable[..., Any]
"""Builds a pool: called with :class:`SyncVerifiers`' arguments (and, for a verifier's own pool,
``resources=`` its :attr:`~grpo_run.OwnWorker.worker_resources`)."""


def local_own_pool(*args: Any, resources: Mapping[str, float], **kwargs: Any) -> SyncVerifiers:
    """A verifier's own pool on this machine: worker processes of this process (the resources
    are a Ray actor's and mean nothing here)."""
    return SyncVerifiers(*args, **kwargs)


def build_sync_pools(specs: VerifierSpecs, policies: Mapping[str, VerifierPolicy], num_workers: int,
                     timeout_s: float, chunk_size: int | None, *, shared: PoolFactory, own: PoolFactory | None,
                     **kwargs: Any) -> Any:
    """The pool(s) of the sync verifiers ``specs``: the ``shared`` one alone, unless a verifier has
    a worker of its own (with ``num_workers = 0`` every verifier runs in this process)."""
    alone = {n: spec for n, spec in specs.items() if policies[n].own_worker} if num_workers > 0 else {}
    if not alone:
        return shared(specs, policies, num_workers, timeout_s, chunk_size, **kwargs)
    own = own if own is not None else local_own_pool
    # Its worker holds a model on purpose: never recycled for its size or its calls (it would load
    # the model again each time).
    kept = {**kwargs, "max_calls_per_worker": 0, "max_worker_rss_mb": 0.0}
    pools: dict[str, Any] = {}
    for name, spec in alone.items():
        config = spec[1]
        resources = dict(config.worker_resources) if isinstance(config, OwnWorker) else {}
        pools[name] = own({name: spec}, policies, 1, timeout_s, chunk_size, resources=resources, **kept)
    rest = {n: spec for n, spec in specs.items() if n not in alone}
    pool = shared if rest else SyncVerifiers  # nothing left to share: an idle pool of no workers
    return RoutedPools(pools, pool(rest, policies, num_workers if rest else 0, timeout_s, chunk_size, **kwargs))


class RoutedPools:
    """Several pools behind one :class:`SyncVerifiers`-like interface: ``own[name]`` runs
    ``name``'s units, ``rest`` everything else."""

    def __init__(self, own: Mapping[str, Any], rest: Any) -> None:
        self._own = dict(own)
        self._rest = rest
        self._all = [*self._own.values(), rest]

    @property
    def num_workers(self) -> int:
        return sum(pool.num_workers for pool in self._all)

    @property
    def worker_pids(self) -> list[int]:
        return [pid for pool in self._all for pid in pool.worker_pids]

    @property
    def recycled(self) -> int:
        return sum(pool.recycled for pool in self._all)

    def start(self) -> None:
        for pool in self._all:
            pool.start()

    def abort(self, reason: str) -> None:
        for pool in self._all:
            pool.abort(reason)

    def close(self) -> None:
        for pool in self._all:
            pool.close()

    def describe(self) -> list[dict[str, Any]]:
        own = [{**entry, "where": f"{entry['where']} of its own"} for pool in self._own.values() for entry in pool.describe()]
        return [*own, *self._rest.describe()]

    async def run(self, units: list[Unit]) -> list[list[CallOutcome]]:
        """One outcome list per unit, in order; the pools run their shares concurrently."""
        shares: dict[int, list[int]] = {}
        for index, unit in enumerate(units):
            pool = self._own.get(unit[0].verifier, self._rest)
            shares.setdefault(id(pool), []).append(index)
        by_id = {id(pool): pool for pool in self._all}
        done = await asyncio.gather(*(by_id[key].run([units[i] for i in indices]) for key, indices in shares.items()))
        outcomes: list[list[CallOutcome]] = [None] * len(units)  # type: ignore[list-item]
        for indices, share in zip(shares.values(), done, strict=True):
            for i, unit_outcomes in zip(indices, share, strict=True):
                outcomes[i] = unit_outcomes
        return outcomes
