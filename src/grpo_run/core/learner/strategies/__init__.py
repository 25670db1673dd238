"""Learner strategies: how the policy is trained by one process or by data-parallel ranks.

``[learner] strategy`` chooses one: ``single`` (:class:`~.base.Strategy`), ``ddp``
(:mod:`.ddp`), ``fsdp2`` (:mod:`.fsdp2`), ``deepspeed`` (:mod:`.deepspeed`). Every data-parallel
rank trains on its token-balanced share of the same mini-batches (:mod:`.sharding`), so the
parameters after a step equal the single process's up to float rounding. The ranks are started
and driven by :mod:`grpo_run.core.placement`.
"""

from __future__ import annotations

import torch

from grpo_run.core.config.processes import LearnerSection
from grpo_run.core.learner.strategies.base import Strategy


def make_strategy(learner: LearnerSection, rank: int, world_size: int, device: torch.device) -> Strategy:
    """The strategy object of rank ``rank`` (``torch.distributed`` must be initialised for every
    strategy but ``single``)."""
    name = learner.strategy
    if name == "single":
        return Strategy()
    if name == "ddp":
        from grpo_run.core.learner.strategies.ddp import DDPStrategy

        return DDPStrategy(rank, world_size, device)
    if name == "fsdp2":
        from grpo_run.core.learner.strategies.fsdp2 import FSDP2Strategy

        return FSDP2Strategy(rank, world_size, device, offload_params=learner.offload_params)
    if name == "deepspeed":
        from grpo_run.core.learner.strategies.deepspeed import DeepSpeedStrategy

        return DeepSpeedStrategy(rank, world_size, device, learner=learner)
    raise ValueError(f"unknown learner strategy {name!r}")


__all__ = ["Strategy", "make_strategy"]
