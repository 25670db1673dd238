"""``distributed.backend = "local"``: engines in this process, learner ranks in child processes."""

from __future__ import annotations

import functools
import os
import socket
from typing import Any

import attrs

from grpo_run.core.config.processes import LearnerSection
from grpo_run.core.learner.learner import build_learner
from grpo_run.core.learner.spec import LearnerSpec
from grpo_run.core.placement.engines import EnginePool, engine_contexts
from grpo_run.core.placement.learner_group import InProcessLearner, LearnerGroup, RankedLearnerGroup
from grpo_run.core.placement.learner_rank import LearnerRank, RankSetup
from grpo_run.core.placement.processes import ProcessWorker
from grpo_run.core.plugins.types import EngineContext


class LocalPlacement:
    """Everything on this machine."""

    def learner_group(self, spec: LearnerSpec, learner: LearnerSection, seed: int) -> LearnerGroup:
        """One learner in this process (``single``), or ``num_learners`` rank processes."""
        if learner.strategy == "single":
            return InProcessLearner(build_learner(spec))
        return start_local_ranks(spec, learner, seed)

    def engines(self, cls: type, config: Any, context: EngineContext, num_engines: int) -> Any:
        """The engine, or ``num_engines`` of them in this process behind one :class:`EnginePool`."""
        if num_engines == 1:
            return cls(config, context)
        return EnginePool([cls(config, c) for c in engine_contexts(context, num_engines)])

    def scoring_pool(self) -> None:
        return None  # the scorer's worker processes, children of this process

    def own_worker_pool(self) -> None:
        return None  # a worker process of this process

    def close(self) -> None:
        pass


def start_local_ranks(spec: LearnerSpec, learner: LearnerSection, seed: int) -> RankedLearnerGroup:
    """Start ``learner.num_learners`` rank processes rendezvousing on a free local port."""
    world = learner.num_learners
    threads = learner.threads_per_learner or max(1, (os.cpu_count() or 1) // world)
    base = RankSetup(spec, learner, rank=0, world_size=world, init_method=f"tcp://127.0.0.1:{free_port()}",
                     threads=threads, seed=seed)
    workers = []
    for rank in range(world):
        setup = attrs.evolve(base, rank=rank, local_rank=rank)
        workers.append(ProcessWorker(f"learner rank {rank}", functools.partial(LearnerRank, setup), threads=threads))
    group = RankedLearnerGroup(workers, hang_timeout_s=learner.hang_timeout_s)
    try:
        for worker in workers:
            worker.start()
        group.start(base.init_method)
    except BaseException:
        for worker in workers:
            worker.kill()
        raise
    return group


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on at ``host`` right now (for a rendezvous there)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
