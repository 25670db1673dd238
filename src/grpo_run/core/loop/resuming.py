"""Resuming a run from a checkpoint: where to start (:func:`resume_point`) and putting a freshly
built run into the checkpoint's state (:func:`restore`). What is restored is listed in
:mod:`grpo_run.core.loop.run`'s docstring."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from grpo_run.core.config.schema import RunConfig
from grpo_run.core.errors import UserError
from grpo_run.core.loop.build import RunParts
from grpo_run.core.loop.checkpoint import find_checkpoint, load_trainer_state, restore_rng_state
from grpo_run.core.loop.weight_sync import push_snapshot
from grpo_run.core.runlog import get_logger


def resume_point(cfg: RunConfig, resume_from: str | Path | None, on_damaged: Callable[[str], None]
                 ) -> tuple[Path | None, dict[str, Any] | None, int]:
    """(checkpoint, its trainer state, its step) to resume from; (None, None, 0) for a new run.
    ``on_damaged`` hears of each damaged checkpoint skipped on the way."""
    if resume_from is None:
        return None, None, 0
    checkpoint = find_checkpoint(resume_from, on_damaged=on_damaged)
    trainer_state = load_trainer_state(checkpoint)
    start_step = int(trainer_state["step"])
    if start_step >= cfg.train.total_steps:
        raise UserError(
            f"--resume {resume_from}: checkpoint {checkpoint.name} is at step {start_step}, and "
            f"train.total_steps = {cfg.train.total_steps}: nothing left to train (raise train.total_steps)"
        )
    return checkpoint, trainer_state, start_step


def restore(parts: RunParts, state: Mapping[str, Any], checkpoint: Path) -> None:
    """Put a freshly built run into the state saved in a checkpoint (the policy weights were
    already loaded from it by ``build_run``)."""
    step = int(state["step"])
    parts.learner.load_state_dict(state["learner"], checkpoint)
    parts.producer.load_rollout_state(state)
    # The engine starts from model.name_or_path: give it the checkpoint's weights (or adapter) and version.
    asyncio.run(push_snapshot(parts.engine, parts.learner.weights_snapshot(), step))
    restore_rng_state(state["rng"])


def regenerated_note(state: Mapping[str, Any], cfg: RunConfig) -> str | None:
    """Batches that were in flight at the save are drawn and generated again, by the checkpoint's
    policy: with ``async_steps >= 2`` the resumed run is not bit-identical to an uninterrupted one."""
    in_flight = [int(i) for i in state.get("in_flight", [])]
    if not in_flight or cfg.rollout.async_steps < 2:
        return None
    step = int(state["step"])
    get_logger().info("batches_regenerated", batches=in_flight, step=step, async_steps=cfg.rollout.async_steps)
    return (f"batches {', '.join(map(str, in_flight))} were in flight at the step-{step} checkpoint: they are "
            f"generated again by the step-{step} policy (rollout.async_steps = {cfg.rollout.async_steps}; "
            f"the resumed run is not bit-identical to an uninterrupted one)")
