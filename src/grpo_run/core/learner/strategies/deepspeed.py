"""``strategy = "deepspeed"``: DeepSpeed ZeRO stage 1, 2 or 3 (the ``grpo-run[deepspeed]`` extra).

DeepSpeed wraps the run's own AdamW (a client optimizer: no fused_adam build) in its ZeRO
optimizer, averages gradients over ranks, clips them at ``optim.max_grad_norm`` and steps; the LR
schedule keeps driving the client optimizer's ``param_groups``, which ZeRO steps. With
``zero_stage = 3`` parameters are partitioned too: full weights for checkpoints and engines are
gathered layer by layer onto rank 0.

The reference policy (``kl.beta > 0``): under ZeRO-3 it is partitioned like the policy by an
engine of its own without an optimizer (DeepSpeed's ZeRO-3 inference mode, with the same
parameter offloading), which gathers each module's parameters around its forward; a Polyak update
is local arithmetic between matching partitions. Under ZeRO-1/2 it stays whole on every rank (as
the policy's weights do: those stages shard only gradients and optimizer state).

Checkpoints hold the full weights in Hugging Face format like every strategy, plus DeepSpeed's own
sharded optimizer files (``engine.save_checkpoint``, one file per rank) under ``learner_state/``:
every rank writes there, so with several nodes the checkpoint directory must be shared storage.
Such a checkpoint resumes with the same ZeRO stage and number of learners.

On a CPU machine DeepSpeed JIT-compiles a small C++ op on first use (30-90 s, cached under
``~/.cache/torch_extensions``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from grpo_run.core.config.processes import LearnerSection
from grpo_run.core.config.schema import OptimSection
from grpo_run.core.learner.reference import ReferenceLoader
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


def reference_config(learner: LearnerSection, dtype: torch.dtype) -> dict[str, Any]:
    """The DeepSpeed config of the ZeRO-3 reference's engine: partitioned (and offloaded) like the
    policy, in the reference's dtype, no optimizer."""
    zero: dict[str, Any] = {"stage": 3}
    if learner.offload_params:
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    return {
        "train_micro_batch_size_per_gpu": 1,
        "zero_optimization": zero,
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
        self.reference_engine: Any = None
        """ZeRO-3: the engine that partitions the reference policy (:meth:`setup_reference`)."""

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

    def setup_reference(self, loader: ReferenceLoader) -> torch.nn.Module:
        reference = loader.load()
        if self.stage < 3:
            return reference
        import deepspeed

        dtype = next(reference.parameters()).dtype
        self.reference_engine, _, _, _ = deepspeed.initialize(
            model=reference, config=reference_config(self.learner, dtype), dist_init_required=False
        )
        # Forwards go through the module itself (its hooks gather each module's parameters), like
        # the policy's no-grad passes.
        return self.reference_engine.module

    def polyak(self, reference: torch.nn.Module, alpha: float) -> None:
        if self.stage < 3:
            return super().polyak(reference, alpha)
        from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus

        # Reference and policy are partitioned alike (the same shapes over the same ranks): each
        # rank moves its own partition, nothing is gathered.
        refs = list(reference.parameters())
        with torch.no_grad():
            for ref, param in zip(refs, self.policy.parameters(), strict=True):
                mine = ref.ds_tensor
                if mine.numel() != param.ds_tensor.numel():
                    raise RuntimeError("the ZeRO-3 reference and policy are not partitioned alike")
                mine.mul_(1.0 - alpha).add_(param.ds_tensor.to(device=mine.device, dtype=mine.dtype), alpha=alpha)
        # Small parameters that ZeRO-3 keeps gathered (stage3_param_persistence_threshold) now hold
        # stale whole copies: released, they are gathered again from the moved partitions.
        stale = [p for p in refs if p.ds_status == ZeroParamStatus.AVAILABLE]
        if stale:
            stale[0].partition(param_list=stale)

    def reference_state_dict(self, reference: torch.nn.Module) -> dict[str, torch.Tensor] | None:
        if self.stage < 3:
            return super().reference_state_dict(reference)
        state = self.reference_engine._zero3_consolidated_16bit_state_dict()  # collective, a module at a time
        return {k: v.clone() for k, v in state.items()} if self.is_main else None

    def load_reference_state_dict(self, reference: torch.nn.Module, state: Mapping[str, torch.Tensor]) -> None:
        if self.stage < 3:
            return super().load_reference_state_dict(reference, state)
        import deepspeed

        with torch.no_grad():
            for name, param in reference.named_parameters():
                # Rank 0's copy is broadcast and partitioned again on leaving.
                with deepspeed.zero.GatheredParameters([param], modifier_rank=0):
                    if self.is_main:
                        param.data.copy_(state[name])

    def close(self) -> None:
        self.engine.destroy()
        if self.reference_engine is not None:
            self.reference_engine.destroy()
