"""The strategies on CUDA with NCCL (``gpu``: skipped cleanly without CUDA; two-rank cases need
two GPUs). Same comparison as ``test_strategies.py``: ranks vs one process on ``cuda:0``."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
import torch

from support.strategies import max_difference, rollout_batches, save_tiny_model, strategy_spec

from grpo_run.core.config.processes import LearnerSection
from grpo_run.core.learner.learner import build_learner
from grpo_run.core.placement.local import start_local_ranks

pytestmark = pytest.mark.gpu

GPU_ATOL = 1e-4
"""CUDA kernels reduce in their own order (and some backward kernels use atomics): looser than the
CPU's 1e-5, still far below what a wrong share or scale moves (> 1e-3)."""


def cuda_spec(model_dir: Path, **kwargs):
    spec = strategy_spec(model_dir, **kwargs)
    return attrs.evolve(spec, model=attrs.evolve(spec.model, device="cuda"))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("gpu-model"))


@pytest.fixture(scope="module")
def reference(model_dir):
    spec = cuda_spec(model_dir)
    learner = build_learner(attrs.evolve(spec, model=attrs.evolve(spec.model, device="cuda:0")))
    for batch in rollout_batches():
        learner.train_step(batch)
    return {k: v.cpu() for k, v in learner.weights_snapshot().items()}


def needs_gpus(count: int) -> None:
    if torch.cuda.device_count() < count:
        pytest.skip(f"needs {count} CUDA devices, found {torch.cuda.device_count()}")


@pytest.mark.parametrize(("strategy", "stage"), [("ddp", None), ("fsdp2", None), ("deepspeed", 2), ("deepspeed", 3)])
@pytest.mark.parametrize("ranks", [1, 2])
def test_nccl_ranks_equal_one_gpu_process(model_dir, reference, strategy, stage, ranks) -> None:
    needs_gpus(ranks)
    if strategy == "deepspeed":
        pytest.importorskip("deepspeed")
    learner = LearnerSection(num_learners=ranks, strategy=strategy, zero_stage=stage, dist_backend="nccl")
    group = start_local_ranks(cuda_spec(model_dir), learner, seed=1)
    try:
        for batch in rollout_batches():
            group.train_step(batch)
        weights = {k: v.cpu() for k, v in group.weights_snapshot().items()}
    finally:
        group.close()
    assert max_difference(weights, reference) < GPU_ATOL
