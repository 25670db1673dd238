"""Where a sweep's variant runs (the :class:`~grpo_run.core.placement.select.Placement` its run is
built with): its learner is its adapter on the sweep's shared base model, its engine a view of the
sweep's shared engine; its verifiers run as a run's do, in workers of its own."""

from __future__ import annotations

from typing import Any

from grpo_run.core.config.processes import LearnerSection
from grpo_run.core.learner.spec import LearnerSpec
from grpo_run.core.plugins.types import EngineContext
from grpo_run.core.sweep.shared_engine import SharedEngine, VariantEngine
from grpo_run.core.sweep.shared_learner import SharedBase, VariantLearner


class VariantPlacement:
    """Variant ``name``'s share of the sweep's base model and engine."""

    def __init__(self, name: str, base: SharedBase, engine: SharedEngine) -> None:
        self.name, self.base, self.engine = name, base, engine

    def learner_group(self, spec: LearnerSpec, learner: LearnerSection, seed: int) -> VariantLearner:
        return self.base.learner(self.name, spec)

    def engines(self, cls: type, config: Any, context: EngineContext, num_engines: int) -> VariantEngine:
        return self.engine.view(self.name, cls, config, context, num_engines)

    def scoring_pool(self) -> None:
        return None  # the scorer's worker processes, children of this process

    def own_worker_pool(self) -> None:
        return None

    def close(self) -> None:
        pass  # the shared base and engine outlive a variant: the sweep closes them
