"""``strategy = "deepspeed"``: DeepSpeed ZeRO stage 1, 2 or 3 (the ``grpo-run[deepspeed]`` extra).

DeepSpeed wraps the run's own AdamW (a client optimizer: no fused_adam build) in its ZeRO
optimizer, averages gradients over ranks, clips them at ``optim.max_grad_norm`` and steps; the LR
schedule keeps driving the client optimizer's ``param_groups``, which ZeRO steps. With
``zero_stage = 3`` parameters are partitioned too: full weights for checkpoints and engines are
gathered layer by layer onto rank 0, and the Polyak update of the (unpartitioned) reference
gathers one policy parameter at a time.

Checkpoints hold the full weights in Hugging Face format like every strategy, plus DeepSpeed's own
sharded optimizer files (``engine.save_checkpoint``, one file per rank) under ``learner_state/``:
every rank writes there, so with several nodes the checkpoint directory must be shared storage.
Such a checkpoint resumes with the same ZeRO stage and number of learners.

On a CPU machine DeepSpeed JIT-compiles a small C++ op on first use (30-90 s, cached under
``~/.cache/torch_extensions``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from grpo_run.core.config.processes import LearnerSection
from grpo_run.core.config.schema import OptimSection
from grpo_run.core.learner.strategies.base import make_optimizer
from grpo_run.core.learner.strategies.parallel import DataParallel

CHECKPOINT_TAG = "deepspeed"


def deepspeed_config(learner: LearnerSection, max_grad_norm: float, dtype: torch.dtype) -> dict[str, Any]:
    """The DeepSpeed config of a run: ZeRO stage, offloading, precision. The learner splits rollout
    batches into mini-batches and those into micro-batches itself, and marks the accumulation
    boundary of each micro-batch (:meth:`DeepSpeedStrategy.accumulate`); DeepSpeed's own counts stay 1."""
    zero: dict[str, Any] = {"stage": learner.stage}
    if learner.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if learner.offload_params:
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    return {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": max_grad_norm,
        "zero_optimization": zero,
        "zero_allow_untested_optimizer": True,  # the client AdamW
        "bf16": {"enabled": dtype == torch.bfloat16},
        "fp16": {"enabled": dtype == torch.float16},
        "steps_per_print": 2**31 - 1,
        "wall_clock_breakdown": False,
    }


class DeepSpeedStrategy(DataParallel):
    name = "deepspeed"

    def __init__(self, rank: int, world_size: int, device: torch.device, *, learner: LearnerSection) -> None:
        super().__init__(rank, world_size, device)
        self.learner = learner
        self.stage = learner.stage
        self.state_format = f"deepspeed-zero{self.stage}-x{world_size}"

    def setup(self, policy: torch.nn.Module, optim: OptimSection, max_grad_norm: float) -> torch.optim.Optimizer:
        import deepspeed

        self.policy = policy
        client = make_optimizer(policy.parameters(), optim)
        dtype = next(policy.parameters()).dtype
        self.engine, _, _, _ = deepspeed.initialize(
            model=policy,
            optimizer=client,
            config=deepspeed_config(self.learner, max_grad_norm, dtype),
            dist_init_required=False,
        )
        return client  # the LR schedule sets its param_groups' lr; ZeRO steps with them

    @property
    def train_module(self) -> Any:
        return self.engine

    def zero_grad(self) -> None:
        pass  # engine.step() zeroes them after each update

    @contextmanager
    def accumulate(self, last: bool) -> Iterator[None]:
        # DeepSpeed's own accumulation boundary: its micro-step counter does not know how many
        # micro-batches this mini-batch has, so the boundary is set before each one.
        self.engine.set_gradient_accumulation_boundary(last)
        yield

    def backward(self, loss: torch.Tensor) -> None:
        self.engine.backward(loss)  # gradient_accumulation_steps = 1: the loss is not rescaled

    def step(self) -> tuple[float, bool]:
        # At the boundary: clip (gradient_clipping), optimizer step, zero the gradients. ZeRO
        # checks the gradients itself (an all-reduce over the ranks): a NaN or inf one is dropped,
        # not applied, and was_step_applied() says so on every rank.
        self.engine.step()
        norm = self.engine.get_global_grad_norm()
        return (float(norm) if norm is not None else 0.0), bool(self.engine.was_step_applied())

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        if self.stage < 3:
            return super().full_state_dict()
        state = self.engine._zero3_consolidated_16bit_state_dict()  # collective; rank 0 gets it
        # Partitioned again after the gather: keep copies, not views of freed parameter storage.
        return {k: v.clone() for k, v in state.items()} if self.is_main else None

    def optimizer_state_dict(self) -> Any:
        return None  # in DeepSpeed's own files (save_files)

    def load_optimizer_state_dict(self, state: Any) -> None:
        pass  # load_files

    def save_files(self, directory: Path) -> None:
        self.engine.save_checkpoint(str(directory), tag=CHECKPOINT_TAG, save_latest=False)

    def load_files(self, directory: Path) -> None:
        if not (directory / CHECKPOINT_TAG).is_dir():
            raise FileNotFoundError(f"{directory / CHECKPOINT_TAG}: no DeepSpeed state in this checkpoint")
        path, _ = self.engine.load_checkpoint(
            str(directory), tag=CHECKPOINT_TAG, load_optimizer_states=True, load_lr_scheduler_states=False
        )
        if path is None:
            raise RuntimeError(f"DeepSpeed could not load its state from {directory}")

    def polyak(self, reference: torch.nn.Module, alpha: float) -> None:
        if self.stage < 3:
            return super().polyak(reference, alpha)
        import deepspeed

        with torch.no_grad():
            for ref, param in zip(reference.parameters(), self.policy.parameters(), strict=True):
                with deepspeed.zero.GatheredParameters([param]):  # collective per parameter
                    ref.mul_(1.0 - alpha).add_(param.detach().to(device=ref.device, dtype=ref.dtype), alpha=alpha)

    def close(self) -> None:
        self.engine.destroy()
