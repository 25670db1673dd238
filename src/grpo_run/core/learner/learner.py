"""The learner: policy-gradient updates on packed rows.

It owns the trainable policy, the optional reference model, the optimizer and the LR schedule.
The loss and KL estimator are plugin objects; this module computes log-probs, combines the
per-token terms, aggregates (:mod:`grpo_run.core.learner.aggregation`) and steps. Off-policy pieces
(mismatch correction, KL in the reward, Polyak reference) live in :mod:`grpo_run.core.learner.offpolicy`.

One learner step on a rollout batch:

1. split it into ``num_mini_batches`` token-balanced packed mini-batches and fix the loss
   normaliser's counts over all of them;
2. pi_old: with a single update it is the current policy, so the detached log-probs of the
   training forward serve (the ratio is exactly 1); with several updates it is computed once, by
   the policy before any update; with ``use_engine_logprobs_as_old`` the engine's log-probs;
3. reference log-probs (when ``kl.beta > 0``), also before any update;
4. ``num_epochs`` x mini-batches optimizer steps, each with gradient clipping;
5. a Polyak reference is moved towards the policy every ``kl.ref_policy_update_freq`` steps.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from grpo_run.core.plugins.types import LossInputs
from grpo_run.core.learner.spec import LearnerSpec
from grpo_run.core.plugins.contracts import KLEstimator, Loss
from grpo_run.core.learner.attention import SequenceLayout
from grpo_run.core.learner.logprobs import batch_layout, completion_logprobs
from grpo_run.core.learner.aggregation import LossNormaliser
from grpo_run.core.learner.offpolicy import kl_reward_advantages, mismatch_weights, polyak_update
from grpo_run.core.learner.schedule import lr_lambda
from grpo_run.core.rollout.packing import PackedBatch, SequenceToPack, split_mini_batches


class Learner:
    """Takes clipped policy-gradient steps on rollout batches.

    ``world_size`` and ``reduce_sum`` (an all-reduce of a small float64 tensor) are for
    data-parallel learners: the loss normaliser counts tokens over all ranks. One process: the
    defaults.
    """

    def __init__(
        self,
        spec: LearnerSpec,
        policy: torch.nn.Module,
        reference: torch.nn.Module | None,
        loss: Loss,
        kl: KLEstimator | None,
        *,
        world_size: int = 1,
        reduce_sum: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        self.spec = spec
        self.policy = policy
        self.reference = reference
        self.loss = loss
        self.kl = kl
        self.beta = spec.kl.beta
        self.pad_token_id = spec.pad_token_id
        self.temperature = spec.temperature
        self.world_size = world_size
        self.reduce_sum = reduce_sum
        o = spec.optim
        self.optimizer = torch.optim.AdamW(
            [p for p in policy.parameters() if p.requires_grad],
            lr=o.lr,
            betas=tuple(o.betas),
            eps=o.eps,
            weight_decay=o.weight_decay,
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_lambda(o, spec.total_steps))
        self.steps = 0
        # The intra-op threads of the building thread (``train.num_threads``), re-applied in
        # whichever worker thread runs a step: the setting is per thread, and the engine sets its own.
        self.num_threads = torch.get_num_threads()

    def weights_snapshot(self) -> dict[str, torch.Tensor]:
        """A detached copy of the policy weights, safe to hand to a generator while training goes on."""
        return {k: v.detach().clone() for k, v in self.policy.state_dict().items()}

    # -- one step --------------------------------------------------------------------------

    def train_step(self, seqs: Sequence[SequenceToPack]) -> dict[str, float]:
        """One optimizer step per mini-batch, ``num_epochs`` times over the rollout batch."""
        alg = self.spec.algorithm
        start = time.perf_counter()
        torch.set_num_threads(self.num_threads)
        param = next(self.policy.parameters())
        mini_batches = [
            b.to(param.device)
            for b in split_mini_batches(seqs, alg.num_mini_batches, alg.pack_length, self.pad_token_id)
        ]
        # Counts for the whole rollout batch, fixed before any update (see loss_aggregation).
        normaliser = LossNormaliser.for_batches(
            [(b.completion_mask, b.seq_ids, b.num_seqs) for b in mini_batches],
            alg.loss_aggregation,
            alg.loss_denominator,
            world_size=self.world_size,
            reduce_sum=self.reduce_sum,
        )
        # One sequence layout per mini-batch, shared by the policy, old and reference forwards.
        layouts = [batch_layout(b) for b in mini_batches]
        multi_update = alg.num_epochs * len(mini_batches) > 1
        self.policy.train()
        recompute_old = multi_update and not alg.use_engine_logprobs_as_old
        old = [self._logprobs(self.policy, b, lay) if recompute_old else None for b, lay in zip(mini_batches, layouts)]
        refs = [self._logprobs(self.reference, b, lay) if self._use_kl else None for b, lay in zip(mini_batches, layouts)]
        totals: dict[str, float] = {}
        updates = 0
        for _ in range(alg.num_epochs):
            for i, batch in enumerate(mini_batches):
                for k, v in self._update(batch, layouts[i], old[i], refs[i], normaliser).items():
                    totals[k] = totals.get(k, 0.0) + v
                updates += 1
        self._finish_step()
        elapsed = time.perf_counter() - start
        out = {k: v / max(updates, 1) for k, v in totals.items()}
        real = sum(b.num_real_tokens for b in mini_batches)
        capacity = sum(b.input_ids.numel() for b in mini_batches)
        out["packing/packed_ratio"] = real / max(1, capacity)
        out["packing/rows"] = float(sum(b.input_ids.shape[0] for b in mini_batches))
        out["perf/learner_tokens_per_s"] = real * alg.num_epochs / max(elapsed, 1e-9)
        out["perf/learner_s"] = elapsed
        return out

    def skip_step(self) -> None:
        """A step with nothing to learn from (every group filtered): the schedule and step count
        still advance, so the LR, the Polyak cadence and checkpoints stay aligned with the loop."""
        with warnings.catch_warnings():  # stepping the schedule without an update is intended here
            warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step\\(\\)` before")
            self.scheduler.step()
        self._finish_step()

    def _finish_step(self) -> None:
        self.steps += 1
        kl_cfg = self.spec.kl
        polyak = self.reference is not None and kl_cfg.reference == "polyak"
        if polyak and self.steps % kl_cfg.ref_policy_update_freq == 0:
            polyak_update(self.reference, self.policy, kl_cfg.alpha)

    @property
    def _use_kl(self) -> bool:
        return self.beta > 0 and self.reference is not None and self.kl is not None

    def _logprobs(self, model: torch.nn.Module, batch: PackedBatch, layout: SequenceLayout) -> torch.Tensor:
        with torch.no_grad():
            return self._policy_logprobs(model, batch, layout)

    def _policy_logprobs(self, model: Any, batch: PackedBatch, layout: SequenceLayout) -> torch.Tensor:
        return completion_logprobs(model, batch, temperature=self.temperature, layout=layout)[0]

    def _forward(self, batch: PackedBatch, layout: SequenceLayout) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Policy log-probs of the loss tokens (with grad) and, when ``algorithm.log_entropy``, their
        entropy (no grad); 0 elsewhere."""
        return completion_logprobs(
            self.policy, batch, temperature=self.temperature, layout=layout,
            entropy=self.spec.algorithm.log_entropy,
        )

    def _update(
        self,
        batch: PackedBatch,
        layout: SequenceLayout,
        old: torch.Tensor | None,
        ref: torch.Tensor | None,
        normaliser: LossNormaliser,
    ) -> dict[str, float]:
        alg, kl_cfg = self.spec.algorithm, self.spec.kl
        logprobs, entropy = self._forward(batch, layout)
        mask, seq_ids, num_seqs = batch.completion_mask, batch.seq_ids, batch.num_seqs
        if alg.use_engine_logprobs_as_old:
            old = batch.engine_logprobs
        elif old is None:
            old = logprobs.detach()
        metrics: dict[str, float] = {}
        advantages = batch.advantages
        if ref is not None and kl_cfg.placement == "reward":
            penalty_kl = self.kl(old, ref)
            advantages, kl_metrics = kl_reward_advantages(advantages, penalty_kl, self.beta, mask, seq_ids, num_seqs)
            metrics.update(kl_metrics)
        out = self.loss(LossInputs(logprobs, old, advantages, mask, seq_ids, num_seqs))
        metrics.update({f"loss/{k}": float(v) for k, v in out.metrics.items()})
        per_token = out.per_token_loss
        if alg.mismatch_correction != "none":
            weights, mismatch_metrics = mismatch_weights(
                old, batch.engine_logprobs, mask, seq_ids, num_seqs,
                alg.mismatch_correction, alg.mismatch_upper, alg.mismatch_lower,
            )
            per_token = per_token * weights
            metrics.update(mismatch_metrics)
        policy_loss = normaliser.reduce(per_token, mask, seq_ids, num_seqs)
        total = policy_loss
        if ref is not None and kl_cfg.placement == "loss":
            kl_loss = normaliser.reduce(self.kl(logprobs, ref), mask, seq_ids, num_seqs)
            total = total + self.beta * kl_loss
            metrics["loss/kl"] = float(kl_loss.detach())
        self.optimizer.zero_grad(set_to_none=True)
        total.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.spec.optim.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        metrics["loss/policy"] = float(policy_loss.detach())
        metrics["loss/total"] = float(total.detach())
        metrics["optim/grad_norm"] = float(grad_norm)
        metrics["optim/lr"] = self.scheduler.get_last_lr()[0]
        if entropy is not None:
            metrics["policy/entropy"] = float(entropy[mask].mean()) if bool(mask.any()) else 0.0
        return metrics

    # -- checkpoints -----------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Optimizer, schedule and step count; the Polyak reference's weights when it has drifted."""
        state: dict[str, Any] = {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "steps": self.steps,
        }
        if self.reference is not None and self.spec.kl.reference == "polyak":
            state["reference"] = {k: v.detach().clone() for k, v in self.reference.state_dict().items()}
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.steps = int(state["steps"])
        if self.reference is not None and "reference" in state:
            self.reference.load_state_dict(state["reference"])


def build_learner(spec: LearnerSpec, **kwargs: Any) -> Learner:
    """Load the policy (and reference) and construct the learner; ``kwargs`` go to its constructor
    (``world_size``, ``reduce_sum`` for data-parallel learners)."""
    model = spec.model
    policy = model.load(model.policy_from)
    if model.gradient_checkpointing:
        policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    reference = None
    if spec.uses_reference:  # frozen or Polyak: starts as the initial policy
        reference = model.load()
        reference.eval().requires_grad_(False)
    kl = spec.kl_estimator.build() if spec.kl_estimator is not None else None
    return Learner(spec, policy, reference, spec.loss.build(), kl, **kwargs)
