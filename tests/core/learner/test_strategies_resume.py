"""Checkpoints and resuming under every data-parallel strategy (2 ranks over gloo), and what a
dying rank does to a step.

A group trains 2 steps, writes a checkpoint (Hugging Face weights gathered from the shards, plus
the strategy's optimizer state) and trains a third; a new group started from that checkpoint
trains the same third step and ends with the same weights. These start two groups per strategy
(~15 s each on 2 cores), so they are ``heavy``.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from support.strategies import WEIGHT_ATOL, learner_section, max_difference, rollout_batches, save_tiny_model, strategy_spec

from grpo_run.core.errors import RunError, UserError
from grpo_run.core.learner.learner import build_learner
from grpo_run.core.placement.learner_group import InProcessLearner
from grpo_run.core.placement.local import start_local_ranks

pytestmark = pytest.mark.heavy


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("resume-model"))


def train_save_continue(model_dir: Path, checkpoint: Path, strategy: str, stage: int | None):
    """Weights after 2 steps (as checkpointed), the learner state, and weights after step 3."""
    group = start_local_ranks(strategy_spec(model_dir), learner_section(strategy, stage), seed=1)
    try:
        first, second, third = rollout_batches()
        group.train_step(first)
        group.train_step(second)
        at_two = {k: v.clone() for k, v in group.weights_snapshot().items()}
        group.save_pretrained(checkpoint)
        state = group.state_dict()
        group.train_step(third)
        return at_two, state, {k: v.clone() for k, v in group.weights_snapshot().items()}
    finally:
        group.close()


def resume_and_continue(model_dir: Path, checkpoint: Path, state, strategy: str, stage: int | None):
    group = start_local_ranks(strategy_spec(model_dir, policy_from=checkpoint), learner_section(strategy, stage), seed=1)
    try:
        group.load_state_dict(state, checkpoint)
        assert group.steps == 2
        group.train_step(rollout_batches()[2])
        return group.weights_snapshot()
    finally:
        group.close()


@pytest.mark.parametrize(("strategy", "stage"), [("ddp", None), ("fsdp2", None), ("deepspeed", 2), ("deepspeed", 3)])
def test_resume_under_every_strategy(model_dir, tmp_path, strategy, stage) -> None:
    if strategy == "deepspeed":
        pytest.importorskip("deepspeed")
    checkpoint = tmp_path / "step_2"
    at_two, state, continued = train_save_continue(model_dir, checkpoint, strategy, stage)
    # The checkpoint's Hugging Face weights are the full (gathered) policy, bit for bit.
    saved = load_file(checkpoint / "model.safetensors")
    assert all(torch.equal(saved[k], at_two[k]) for k in saved) and set(at_two) >= set(saved)
    if strategy == "deepspeed":  # DeepSpeed's own optimizer shards, one per rank
        shards = sorted(p.name for p in (checkpoint / "learner_state" / "deepspeed").glob("*optim_states.pt"))
        assert len(shards) == 2, shards
    resumed = resume_and_continue(model_dir, checkpoint, state, strategy, stage)
    assert max_difference(resumed, continued) == 0.0  # same ranks, same optimizer state: exact


def test_ddp_checkpoint_resumes_in_one_process_and_fsdp2_refuses(model_dir, tmp_path) -> None:
    checkpoint = tmp_path / "ddp_step_2"
    _, state, continued = train_save_continue(model_dir, checkpoint, "ddp", None)
    assert state["format"] == "torch"  # replicated optimizer state, the single process's format
    single = InProcessLearner(build_learner(strategy_spec(model_dir, policy_from=checkpoint)))
    single.load_state_dict(state, checkpoint)
    single.train_step(rollout_batches()[2])
    assert max_difference(single.weights_snapshot(), continued) < WEIGHT_ATOL

    fsdp2_state = dict(state, format="fsdp2")
    with pytest.raises(UserError, match=r"saved by a 'fsdp2' learner .* learner.strategy = 'single'"):
        single.load_state_dict(fsdp2_state, checkpoint)


def test_a_killed_rank_fails_the_next_step_naming_rank_and_step(model_dir) -> None:
    group = start_local_ranks(strategy_spec(model_dir), learner_section("ddp"), seed=1)
    try:
        group.train_step(rollout_batches()[0])
        victim = group.workers[1]
        os.kill(victim.pid, signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(RunError, match=rf"learner rank 1 \(pid {victim.pid}, killed by SIGKILL\) died during train_step \(step 2\)"):
            group.train_step(rollout_batches()[1])
        assert time.monotonic() - start < 10
        with pytest.raises(RunError, match="the learner group is unusable"):
            group.weights_snapshot()
    finally:
        group.close()
    assert all(w.describe().endswith(")") and "pid" in w.describe() for w in group.workers)
