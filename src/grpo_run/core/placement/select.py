"""Choosing the placement a run asks for (``[distributed] backend``)."""


from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from grpo_run.core.config.processes import LearnerSection
from grpo_run.core.config.schema import RunConfig
from grpo_run.core.learner.spec import LearnerSpec
from grpo_run.core.placement.learner_group import LearnerGroup
from grpo_run.core.plugins.types import EngineContext


class Placement(Protocol):
    def learner_group(self, spec: LearnerSpec, learner: LearnerSection, seed: int) -> LearnerGroup: ...

    def engines(self, cls: type, config: Any, context: EngineContext, num_engines: int) -> Any: ...

    def scoring_pool(self) -> Callable[..., Any] | None:
        """What runs the sync verifiers (``RewardScorer``'s ``sync_pool``); ``None``: the scorer's
        own worker processes."""
        ...

    def own_worker_pool(self) -> Callable[..., Any] | None:
        """What runs a verifier with a worker of its own (``RewardScorer``'s ``own_pool``);
        ``None``: a worker process of this process."""
        ...

    def close(self) -> None: ...


def build_placement(cfg: RunConfig) -> Placement:
    """The placement ``cfg.distributed`` asks for (a Ray placement connects or starts Ray now)."""
    if cfg.distributed.backend == "ray":
        from grpo_run.core.placement.ray_backend import RayPlacement

        return RayPlacement.connect(cfg)
    from grpo_run.core.placement.local import LocalPlacement

    return LocalPlacement()

