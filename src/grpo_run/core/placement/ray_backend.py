"""``distributed.backend = "ray"``: engines and learner ranks as Ray actors.

Connects to the cluster at ``RAY_ADDRESS`` (``ray start --head`` on one node, ``ray start
--address=...`` on the others; :mod:`.ray_join`) or, without it, starts a local Ray instance sized to fit the
run's actors. Each learner rank is a :class:`~.ray_actors.RayLearnerRank` actor with
``distributed.learner_resources`` (rank 0 names the rendezvous on its node; NCCL or gloo inside),
each engine an :class:`~.ray_actors.EngineActor` with ``distributed.engine_resources``. With
``distributed.placement_strategy`` every actor's resources are reserved up front in one placement
group (learners first, then engines, one bundle each). Actors that do not start within
``distributed.startup_timeout_s`` fail the run with what they asked for and what the cluster has.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from grpo_run.core.config.processes import ActorResources, LearnerSection, actor_resources
from grpo_run.core.config.schema import RunConfig
from grpo_run.core.errors import RunError
from grpo_run.core.learner.spec import LearnerSpec
from grpo_run.core.placement.engines import EnginePool, engine_contexts
from grpo_run.core.placement.learner_group import RankedLearnerGroup
from grpo_run.core.placement.learner_rank import RankSetup
from grpo_run.core.placement.ray_fit import describe_nodes, why_unplaceable
from grpo_run.core.placement.ray_join import join_cluster
from grpo_run.core.placement.ray_watcher import start_watcher, stop_watcher
from grpo_run.core.placement.ray_actors import (
    EngineActor,
    RayLearnerRank,
    RayRankWorker,
    placed,
    remote_engine,
)
from grpo_run.core.plugins.abilities import OwnWorker
from grpo_run.core.plugins.types import EngineContext
from grpo_run.core.runlog import get_logger


class RayPlacement:
    def __init__(self, cfg: RunConfig, started_here: bool, watcher: Any = None) -> None:
        self.cfg = cfg
        self.settings = cfg.distributed
        self.started_here = started_here
        self.watcher = watcher
        self.local = watcher is not None
        """A single-machine instance started by this run: rendezvous on the loopback interface."""
        """The :mod:`.ray_watcher` of a local instance started here: Ray goes when this process goes."""
        self.group: Any = None
        self._bundles: dict[str, int] = {}

    @classmethod
    def connect(cls, cfg: RunConfig) -> RayPlacement:
        """Join ``RAY_ADDRESS``'s cluster or start a local instance; reserve the placement group."""
        started = False
        address = os.environ.get("RAY_ADDRESS")
        if not ray.is_initialized():
            with _keep_signal_handlers():
                if address:  # one line, not Ray's retries and traceback
                    join_cluster(address, cfg.distributed.join_timeout_s)
                else:
                    need = sum(r.num_cpus * n for r, n in _actors(cfg))
                    ray.init(num_cpus=max(os.cpu_count() or 1, math.ceil(need)), include_dashboard=False,
                             logging_level=logging.WARNING)
            started = True
        watcher = start_watcher(_node_pids()) if started and not address else None
        placement = cls(cfg, started, watcher)
        try:
            if cfg.distributed.placement_strategy is not None:
                placement._reserve()
        except BaseException:
            placement.close()
            raise
        get_logger().info("ray_connected", started_local=started and not os.environ.get("RAY_ADDRESS"),
                          resources=ray.cluster_resources())
        return placement

    def _check_fits(self, strategy: str | None) -> None:
        """Fail at once when the cluster's nodes can never hold the run's actors (:mod:`.ray_fit`)."""
        kinds = ("learner", "engine", "scoring")
        actors = [(kinds[i] if i < len(kinds) else "verifier", _bundle(resources), count)
                  for i, (resources, count) in enumerate(_actors(self.cfg))]
        if strategy is not None:
            actors = actors[:2]  # the placement group holds the learners and engines
        reason = why_unplaceable(actors, strategy, ray.nodes())
        if reason is not None:
            raise RunError(reason)

    def _reserve(self) -> None:
        self._check_fits(self.settings.placement_strategy)
        bundles, index = [], 0
        for kind, (resources, count) in zip(("learner", "engine"), _actors(self.cfg)):
            self._bundles[kind] = index
            bundles += [_bundle(resources)] * count
            index += count
        strategy = self.settings.placement_strategy
        self.group = placement_group(bundles, strategy=strategy)
        try:
            ray.get(self.group.ready(), timeout=self.settings.startup_timeout_s)
        except GetTimeoutError:
            raise RunError(
                f"the Ray cluster could not reserve {len(bundles)} bundles ({strategy}) within "
                f"{self.settings.startup_timeout_s:g} s: asked for {bundles}; available now: "
                f"{ray.available_resources()}, on {describe_nodes(ray.nodes())} (other work holds the rest: "
                f"change distributed.*_resources, add nodes or wait)"
            ) from None

    def _options(self, kind: str, index: int) -> dict[str, Any]:
        resources = self.settings.resources_of(kind)  # type: ignore[arg-type]
        options: dict[str, Any] = {"num_cpus": resources.num_cpus, "num_gpus": resources.num_gpus}
        if resources.resources:
            options["resources"] = dict(resources.resources)
        if self.group is not None:
            options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                self.group, placement_group_bundle_index=self._bundles[kind] + index
            )
        return options

    def _running(self, actors: list[Any], kind: str) -> list[dict[str, Any]]:
        """Each actor's :func:`~.ray_actors.where_am_i`, once all have started."""
        timeout = self.settings.startup_timeout_s
        try:
            return ray.get([actor.where.remote() for actor in actors], timeout=timeout)
        except GetTimeoutError:
            for actor in actors:
                ray.kill(actor)
            raise RunError(
                f"{kind} actors not running after {timeout:g} s: each asks for "
                f"{_bundle(self.settings.resources_of(kind))}; available now: {ray.available_resources()} "  # type: ignore[arg-type]
                f"(change distributed.{kind}_resources or add nodes)"
            ) from None
        except RayActorError as exc:
            for actor in actors:
                ray.kill(actor)
            raise RunError(f"a {kind} actor could not start: {exc}") from None

    def learner_group(self, spec: LearnerSpec, learner: LearnerSection, seed: int) -> RankedLearnerGroup:
        if self.group is None:  # actors placed one by one: can each of them, and all together, fit at all?
            self._check_fits(None)
        world = learner.num_learners
        threads = learner.threads_per_learner or max(1, int(self.settings.resources_of("learner").num_cpus))
        actor_cls = ray.remote(RayLearnerRank)
        actors = [
            actor_cls.options(**self._options("learner", rank)).remote(
                RankSetup(spec, learner, rank=rank, world_size=world, local_rank=0, threads=threads, seed=seed)
            )
            for rank in range(world)
        ]
        wheres = self._running(actors, "learner")
        get_logger().info("learners_placed", ranks=[{"rank": rank, **placed(w)} for rank, w in enumerate(wheres)])
        workers = [RayRankWorker(f"learner rank {rank}", actor, w) for rank, (actor, w) in enumerate(zip(actors, wheres))]
        group = RankedLearnerGroup(workers, share=ray.put,
                                   hang_timeout_s=learner.hang_timeout_s)
        try:
            group.start(ray.get(actors[0].rendezvous.remote(self.local)))
        except BaseException:
            group.close()
            raise
        return group

    def engines(self, cls: type, config: Any, context: EngineContext, num_engines: int) -> EnginePool:
        actor_cls = ray.remote(EngineActor)
        actors = [
            actor_cls.options(**self._options("engine", i)).remote(cls, config, ctx)
            for i, ctx in enumerate(engine_contexts(context, num_engines))
        ]
        wheres = self._running(actors, "engine")
        get_logger().info("engines_started", engines=[{"engine": i, "host": w["host"], **placed(w)}
                                                      for i, w in enumerate(wheres)])
        return EnginePool([remote_engine(f"engine {i}", cls, a, w) for i, (a, w) in enumerate(zip(actors, wheres))])

    def scoring_pool(self) -> Callable[..., Any] | None:
        """Scoring actors (``distributed.scoring_actors``), or ``None`` to keep the workers on this node."""
        if not self.settings.scoring_actors:
            return None
        from grpo_run.core.placement.ray_scoring import RaySyncVerifiers

        return functools.partial(
            RaySyncVerifiers, num_actors=self.settings.scoring_actors,
            resources=self.settings.resources_of("scoring"), startup_timeout_s=self.settings.startup_timeout_s,
        )

    def own_worker_pool(self) -> Callable[..., Any]:
        """A verifier with a worker of its own (a reward model) gets a Ray actor of its own, with
        the resources its config names (:class:`~grpo_run.OwnWorker`)."""
        from grpo_run.core.placement.ray_scoring import own_actor_pool

        return functools.partial(own_actor_pool, startup_timeout_s=self.settings.startup_timeout_s)

    def close(self) -> None:
        if self.group is not None:
            remove_placement_group(self.group)
            self.group = None
        if self.started_here and ray.is_initialized():
            ray.shutdown()
        if self.watcher is not None:
            stop_watcher(self.watcher)
            self.watcher = None


@contextlib.contextmanager
def _keep_signal_handlers() -> Iterator[None]:
    """``ray.init`` replaces the SIGTERM handler with one that exits at once (``sys.exit``, then a
    native abort: exit 134, no checkpoint): put the run's own SIGINT/SIGTERM handlers back, so a
    stop signal means the same under Ray as on the local backend."""
    main = threading.current_thread() is threading.main_thread()
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)} if main else {}
    try:
        yield
    finally:
        for signum, handler in saved.items():
            if handler is not None:
                signal.signal(signum, handler)


def _node_pids() -> list[int]:
    """Pids of the processes ``ray.init`` started for the local node (GCS, raylet, ...)."""
    node = getattr(ray._private.worker, "_global_node", None)  # noqa: SLF001 - no public way to ask
    processes = getattr(node, "all_processes", {}) if node is not None else {}
    return [info.process.pid for infos in processes.values() for info in infos if info.process is not None]


def _actors(cfg: RunConfig) -> list[tuple[ActorResources, int]]:
    """(resources, count) of the learner, engine and scoring actors, then verifiers' own actors
    (the placement group reserves bundles for the first two only)."""
    d = cfg.distributed
    own = [(actor_resources(conf.worker_resources), 1) for conf in cfg.verifiers.values()
           if isinstance(conf, OwnWorker) and cfg.scoring.num_workers > 0]
    return [(d.resources_of("learner"), cfg.learner.num_learners), (d.resources_of("engine"), cfg.engine.num_engines),
            (d.resources_of("scoring"), d.scoring_actors), *own]


def _bundle(resources: ActorResources) -> dict[str, float]:
    bundle = {"CPU": resources.num_cpus, **dict(resources.resources)}
    if resources.num_gpus:
        bundle["GPU"] = resources.num_gpus
    return bundle
