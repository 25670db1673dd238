"""Shared pieces of the learner-strategy tests: a saved tiny model, a learner spec with every
moving part (mini-batches, epochs, clipping, a Polyak reference with a KL penalty), rollout
batches that leave a rank idle, and the single-process run every strategy is compared with."""

from __future__ import annotations

from pathlib import Path

import torch

from support.learner import make_seqs, tiny_model

from grpo_run.core.config.processes import LearnerSection
from grpo_run.core.config.schema import AlgorithmSection, KLSlot, OptimSection
from grpo_run.core.learner.learner import build_learner
from grpo_run.core.learner.spec import ComponentSpec, LearnerSpec, ModelSpec
from grpo_run.core.rollout.packing import SequenceToPack
from grpo_run.plugins.kl.k3 import K3KL
from grpo_run.plugins.losses.dapo import DapoLoss

WEIGHT_ATOL = 1e-5
"""fp32: after 3 steps x 2 epochs x 2 mini-batches at lr 1e-2 the ranks' weights differ from one
process's by ~3e-6 (the gradient is summed in another order); a wrong share, scale or skipped
update moves them by > 1e-3."""


def save_tiny_model(directory: Path) -> Path:
    tiny_model().save_pretrained(directory)
    return directory


def strategy_spec(
    model_dir: Path,
    *,
    policy_from: Path | None = None,
    loss_aggregation: str = "token-mean",
    loss_denominator: str | float = "token",
    forward_tokens: int = 0,
) -> LearnerSpec:
    algorithm = AlgorithmSection(
        pack_length=16,
        num_mini_batches=2,
        num_epochs=2,
        loss_aggregation=loss_aggregation,  # type: ignore[arg-type]
        loss_denominator=loss_denominator,  # type: ignore[arg-type]
    )
    return LearnerSpec(
        model=ModelSpec(path=str(model_dir), policy_from=str(policy_from) if policy_from else None),
        algorithm=algorithm,
        optim=OptimSection(lr=1e-2, max_grad_norm=1.0, warmup_steps=2, lr_scheduler="linear"),
        kl=KLSlot(beta=0.1, reference="polyak", alpha=0.5),
        loss=ComponentSpec(DapoLoss, DapoLoss.Config()),
        kl_estimator=ComponentSpec(K3KL, K3KL.Config()),
        temperature=1.0,
        total_steps=10,
        pad_token_id=0,
        forward_tokens=forward_tokens,
        logprob_forward_tokens=forward_tokens,
    )


def rollout_batches() -> list[list[SequenceToPack]]:
    """Three steps; the second has 3 sequences, so its second mini-batch leaves one of 2 ranks idle."""
    return [make_seqs(9, seed=1), make_seqs(3, seed=2), make_seqs(8, seed=3)]


def single_process_run(model_dir: Path, **algorithm: str | float) -> tuple[dict[str, torch.Tensor], list[dict[str, float]]]:
    """Weights and metrics of one process after :func:`rollout_batches` and one skipped step
    (``algorithm``: the aggregation keywords of :func:`strategy_spec`)."""
    learner = build_learner(strategy_spec(model_dir, **algorithm))  # type: ignore[arg-type]
    metrics = [learner.train_step(batch) for batch in rollout_batches()]
    learner.skip_step()
    return learner.weights_snapshot(), metrics


def learner_section(strategy: str, stage: int | None = None) -> LearnerSection:
    return LearnerSection(num_learners=2, strategy=strategy, zero_stage=stage, threads_per_learner=1)


def max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert sorted(a) == sorted(b)
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)
