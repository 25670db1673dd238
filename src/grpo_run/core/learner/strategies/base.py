"""What a learner strategy decides, and the single-process strategy (today's behaviour).

A :class:`Strategy` owns everything that differs between one process and data-parallel ranks:
how the policy is wrapped and which optimizer steps it, how a rank's mini-batches are chosen,
how the backward pass and the optimizer step happen, how the full weights and the optimizer
state are gathered for checkpoints and engines, and how per-rank metrics become one set. The
:class:`~grpo_run.core.learner.learner.Learner` calls these members and nothing else, so the loss,
KL, pi_old and normaliser logic is written once for every strategy.

Data-parallel strategies (:class:`DataParallel` and its subclasses) run inside an initialised
``torch.distributed`` process group, one rank per process.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from grpo_run.core.config.schema import OptimSection
from grpo_run.core.learner.offpolicy import polyak_update
from grpo_run.core.learner.reference import ReferenceLoader
from grpo_run.core.rollout.packing import SequenceToPack, token_balanced_groups


def make_optimizer(params: Any, optim: OptimSection) -> torch.optim.Optimizer:
    """AdamW with the run's settings over the trainable ``params`` (the same for every strategy:
    DeepSpeed wraps this client optimizer instead of building its own)."""
    return torch.optim.AdamW(
        [p for p in params if p.requires_grad],
        lr=optim.lr,
        betas=tuple(optim.betas),
        eps=optim.eps,
        weight_decay=optim.weight_decay,
    )


class Strategy:
    """One process: the policy trains as it is, on every mini-batch of the rollout batch."""

    name = "single"
    state_format = "torch"
    """What :meth:`optimizer_state_dict` produces; a checkpoint resumes only under a strategy of
    the same format (single and ddp share ``"torch"``)."""
    rank = 0
    world_size = 1

    def load_device(self, device: str) -> str:
        """Where the policy is loaded before :meth:`setup` (the run's device; fsdp2: the CPU)."""
        return device

    def setup(self, policy: torch.nn.Module, optim: OptimSection, max_grad_norm: float) -> torch.optim.Optimizer:
        """Wrap ``policy`` for training and return the optimizer whose ``param_groups`` the LR
        schedule drives."""
        self.policy = policy
        self.max_grad_norm = max_grad_norm
        self.optimizer = make_optimizer(policy.parameters(), optim)
        return self.optimizer

    @property
    def train_module(self) -> Any:
        """What the training forward (the one with grad) goes through."""
        return self.policy

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def reduce_sum(self) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """Sums a small tensor over ranks (the loss normaliser's counts); ``None`` on one process."""
        return None

    def mini_batch_shares(self, seqs: Sequence[SequenceToPack], num_mini_batches: int) -> list[list[SequenceToPack]]:
        """This process's sequences of each mini-batch: ``num_mini_batches`` token-balanced groups
        (fewer when there are fewer sequences), in input order within each."""
        groups = token_balanced_groups([len(s) for s in seqs], num_mini_batches)
        return [[seqs[i] for i in group] for group in groups]

    def max_over_ranks(self, value: int) -> int:
        """The largest ``value`` of any rank (collective where there are several): every rank runs
        the same number of forwards, since sharded strategies gather weights in each one."""
        return value

    def zero_grad(self) -> None:
        """Clear the gradients before a mini-batch's first micro-batch."""
        self.optimizer.zero_grad(set_to_none=True)

    @contextmanager
    def accumulate(self, last: bool) -> Iterator[None]:
        """Around one micro-batch's forward and backward: gradients accumulate locally, and are
        synchronised over ranks only in the ``last`` one of the mini-batch."""
        yield

    def backward(self, loss: torch.Tensor) -> None:
        """Add one micro-batch's gradient."""
        loss.backward()

    def step(self) -> tuple[float, bool]:
        """Gradient clipping at ``max_grad_norm`` and one optimizer step on the accumulated
        gradient: ``(the gradient's norm before clipping, whether the step was taken)``.

        A gradient whose norm is not finite (NaN or inf, on any rank: every rank must agree) is
        dropped instead: no optimizer step, the gradients cleared, the weights and the optimizer
        state unchanged (:func:`~grpo_run.core.learner.learner.nan_gradient_unless_finite` turns
        a non-finite loss into such a gradient)."""
        norm = self._clip_gradients()
        if self.max_over_ranks(int(not math.isfinite(norm))):
            self.optimizer.zero_grad(set_to_none=True)
            return norm, False
        self.optimizer.step()
        return norm, True

    def _clip_gradients(self) -> float:
        return float(torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm))

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        """The policy's full weights as detached CPU-safe copies, on the main rank (``None`` on
        the others; every rank must call it where gathering is collective)."""
        return {k: v.detach().clone() for k, v in self.policy.state_dict().items()}

    def optimizer_state_dict(self) -> Any:
        """The optimizer state to checkpoint (main rank; ``None`` elsewhere)."""
        return self.optimizer.state_dict()

    def load_optimizer_state_dict(self, state: Any) -> None:
        self.optimizer.load_state_dict(state)

    def save_files(self, directory: Path) -> None:
        """Write the strategy's own state files (sharded optimizer state) under ``directory``."""

    def load_files(self, directory: Path) -> None:
        """Read back what :meth:`save_files` wrote."""

    def setup_reference(self, loader: ReferenceLoader) -> torch.nn.Module:
        """Load the reference policy (``loader.load(device)``) and hold it as this strategy holds frozen
        weights; returns the module its no-grad log-prob forwards go through. Every rank runs
        the same number of them (:meth:`max_over_ranks`), as for the policy's. One process: whole,
        on ``model.device``."""
        return loader.load()

    def polyak(self, reference: torch.nn.Module, alpha: float) -> None:
        """Move the reference (held whole) towards the policy."""
        polyak_update(reference, self.policy, alpha)

    def reference_state_dict(self, reference: torch.nn.Module) -> dict[str, torch.Tensor] | None:
        """The reference's full weights as detached copies, on the main rank (``None`` on the
        others; every rank must call it where gathering is collective)."""
        return {k: v.detach().clone() for k, v in reference.state_dict().items()}

    def load_reference_state_dict(self, reference: torch.nn.Module, state: Mapping[str, torch.Tensor]) -> None:
        """Load full weights from :meth:`reference_state_dict` (every rank is given all of them
        and keeps its part)."""
        reference.load_state_dict(state)

    def combine_metrics(self, metrics: dict[str, float], totals: Mapping[str, float]) -> dict[str, float]:
        """One set of step metrics from every rank's (``totals``: this rank's ``real_tokens``,
        ``capacity``, ``loss_tokens``, ``rows``)."""
        return metrics

    def close(self) -> None:
        """Release what :meth:`setup` took."""

