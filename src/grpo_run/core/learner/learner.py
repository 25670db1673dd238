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
4. ``num_epochs`` x mini-batches optimizer steps, each with gradient clipping; a mini-batch's
   forward and backward run in micro-batches of whole rows under ``learner.max_tokens_per_forward``
   (:mod:`grpo_run.core.learner.micro`), the no-grad passes of 2. and 3. under their own budget;
5. a Polyak reference is moved towards the policy every ``kl.ref_policy_update_freq`` steps.

A mini-batch whose loss or gradient is not finite (NaN or inf: a reward that overflowed, a loss
plugin's bug) is not applied: the strategy drops its gradient and skips the optimizer step on
every rank, so the weights and the optimizer state stay as they were. The LR schedule and the
step count still advance, as in a step whose every group was filtered (:meth:`Learner.skip_step`).
``optim/skipped_updates`` counts such mini-batches in each step.
"""

from __future__ import annotations

import time
import warnings
from contextlib import nullcontext
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import torch

from grpo_run.core.errors import UserError
from grpo_run.core.memory.budget import AUTO, Budgets, choose_budgets, peak_bytes
from grpo_run.core.runlog import get_logger
from grpo_run.core.plugins.types import LossInputs
from grpo_run.core.compat import enable_activation_checkpointing
from grpo_run.core.learner.spec import LearnerSpec
from grpo_run.core.plugins.adapters import LoraAdapter
from grpo_run.core.plugins.contracts import KLEstimator, Loss
from grpo_run.core.learner.layout import SequenceLayout
from grpo_run.core.learner.logprobs import completion_logprobs
from grpo_run.core.learner.micro import MicroBatch, MicroBatches, MicroMetrics, assemble_rows, pack_mini_batch, take_rows
from grpo_run.core.learner.aggregation import LossNormaliser
from grpo_run.core.learner.offpolicy import kl_reward_advantages, mismatch_weights, sampled_engine_logprobs
from grpo_run.core.learner.reference import ReferenceLoader
from grpo_run.core.learner.schedule import lr_lambda
from grpo_run.core.learner.strategies.base import Strategy
from grpo_run.core.learner.strategies.sharding import is_idle
from grpo_run.core.rollout.packing import PackedBatch, SequenceToPack


SKIPPED_UPDATES = "optim/skipped_updates"
"""Mini-batch updates of a step not applied because the loss or the gradient was not finite (a sum
over the step, not a mean)."""
_IDLE_METRICS = ("loss/policy", "loss/total", "loss/kl", "optim/grad_norm", "optim/lr", SKIPPED_UPDATES)
"""What an idle batch (a rank with no share of a mini-batch) reports: its zero loss share and the
optimizer numbers every rank has."""


class Learner:
    """Takes clipped policy-gradient steps on rollout batches.

    ``strategy`` (:mod:`grpo_run.core.learner.strategies`) decides how the policy is wrapped and
    stepped and which share of each mini-batch this process trains on; a data-parallel rank's
    loss normaliser counts tokens over all ranks. Default: one process.

    ``reference``: the reference policy, used as given (the LoRA policy with its adapters off, a
    test's model), or a :class:`~grpo_run.core.learner.reference.ReferenceLoader` that the strategy
    calls once the policy is wrapped, holding the reference as it holds frozen weights (sharded
    like the policy under fsdp2 and ZeRO-3).
    """

    def __init__(
        self,
        spec: LearnerSpec,
        policy: torch.nn.Module,
        reference: torch.nn.Module | ReferenceLoader | None,
        loss: Loss,
        kl: KLEstimator | None,
        *,
        strategy: Strategy | None = None,
        adapter: str = "default",
    ) -> None:
        self.spec = spec
        self.policy = policy
        self.adapter = adapter
        """With LoRA, the name of this learner's adapter on ``policy`` (a sweep's variant's; a
        run's is peft's ``"default"``)."""
        self.loss = loss
        self.kl = kl
        self.beta = spec.kl.beta
        self.pad_token_id = spec.pad_token_id
        self.temperature = spec.temperature
        self.strategy = strategy if strategy is not None else Strategy()
        o = spec.optim
        self.optimizer = self.strategy.setup(policy, o, o.max_grad_norm)
        # Loaded after the policy is wrapped (sharded): a rank never holds two whole models.
        if isinstance(reference, ReferenceLoader):
            reference = self.strategy.setup_reference(reference)
        self.reference = reference
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_lambda(o, spec.total_steps))
        self.steps = 0
        budgets = _token_budgets(spec, policy)
        self.forward_tokens, self.logprob_forward_tokens = budgets.train, budgets.logprob
        """Tokens per training (no-grad) forward in effect (``learner.max_tokens_per_forward``; 0: no bound)."""
        self.budget_line = budgets.line if AUTO in (spec.forward_tokens, spec.logprob_forward_tokens) else None
        """How an automatic budget was chosen."""
        self._planned_resident = budgets.resident
        self._planned_peak = 0.0
        # The intra-op threads of the building thread (``train.num_threads``), re-applied in
        # whichever worker thread runs a step: the setting is per thread, and the engine sets its own.
        self.num_threads = torch.get_num_threads()

    def weights_snapshot(self) -> dict[str, torch.Tensor] | LoraAdapter:
        """A detached copy of the policy weights, safe to hand to a generator while training goes on
        (gathered on rank 0 of a data-parallel learner: ``None`` on the other ranks).

        With LoRA: the adapter alone (``model.lora.sync = "adapter"``), or the merged weights under
        the base model's names (what an engine that loaded the base model expects)."""
        lora = self.spec.model.lora
        if lora is not None:
            from grpo_run.core.learner.lora import adapter_snapshot, merged_state_dict

            if not self.strategy.is_main:
                return None  # type: ignore[return-value]
            if lora.sync == "adapter":
                return adapter_snapshot(self.policy, self.adapter)
            return merged_state_dict(self.policy, self.adapter)
        return self.strategy.full_state_dict()  # type: ignore[return-value]

    # -- one step --------------------------------------------------------------------------

    def train_step(self, seqs: Sequence[SequenceToPack]) -> dict[str, float]:
        """One optimizer step per mini-batch, ``num_epochs`` times over the rollout batch."""
        alg = self.spec.algorithm
        start = time.perf_counter()
        torch.set_num_threads(self.num_threads)
        param = next(self.policy.parameters())
        mini_batches = [
            pack_mini_batch(share, alg.pack_length, self.pad_token_id, self.forward_tokens).to(param.device)
            for share in self.strategy.mini_batch_shares(seqs, alg.num_mini_batches)
        ]
        # Counts for the whole rollout batch, fixed before any update (see loss_aggregation).
        normaliser = LossNormaliser.for_batches(
            [(b.completion_mask, b.seq_ids, b.num_seqs) for b in mini_batches],
            alg.loss_aggregation,
            alg.loss_denominator,
            world_size=self.strategy.world_size,
            reduce_sum=self.strategy.reduce_sum,
        )
        # Each mini-batch's micro-batches under the token budgets; a piece's sequence layout is
        # built once and shared by every forward over the same rows.
        pieces = MicroBatches(self.strategy, self.pad_token_id, alg.share_prompts)
        micro = [pieces.split(i, b, self.forward_tokens) for i, b in enumerate(mini_batches)]
        multi_update = alg.num_epochs * len(mini_batches) > 1
        self.policy.train()
        first_step = not self.optimizer.state  # its state is made by this step's first update
        recompute_old = multi_update and not alg.use_engine_logprobs_as_old
        old = [self._logprobs(self.policy, i, b, pieces) if recompute_old else None for i, b in enumerate(mini_batches)]
        refs = [self._logprobs(self.reference, i, b, pieces) if self._use_kl else None for i, b in enumerate(mini_batches)]
        totals: dict[str, float] = {}
        counts: dict[str, int] = {}
        for _ in range(alg.num_epochs):
            for i, batch in enumerate(mini_batches):
                for k, v in self._update(micro[i], old[i], refs[i], normaliser).items():
                    if is_idle(batch) and k not in _IDLE_METRICS:
                        continue  # a rank's idle batch has no loss tokens to measure
                    totals[k] = totals.get(k, 0.0) + v
                    counts[k] = counts.get(k, 0) + 1
        self._finish_step()
        elapsed = time.perf_counter() - start
        out = {k: v / counts[k] for k, v in totals.items()}
        out[SKIPPED_UPDATES] = totals.get(SKIPPED_UPDATES, 0.0)  # a count, not a mean
        trained = [b for b in mini_batches if not is_idle(b)]
        real = sum(b.num_real_tokens for b in trained)
        capacity = sum(b.input_ids.numel() for b in trained)
        out["packing/packed_ratio"] = real / max(1, capacity)
        out["packing/rows"] = float(sum(b.input_ids.shape[0] for b in trained))
        # Prompt tokens computed once for several sequences (algorithm.share_prompts): not run again.
        out["packing/shared_prompt_tokens"] = float(sum(
            p.layout.num_virtual_tokens - p.layout.num_tokens
            for b, parts in zip(mini_batches, micro) if not is_idle(b) for p in parts if p.rows
        ))
        out["perf/micro_batches"] = float(sum(len(parts) for parts in micro)) / max(1, len(micro))
        out["perf/learner_tokens_per_s"] = real * alg.num_epochs / max(elapsed, 1e-9)
        out["perf/learner_s"] = elapsed
        out["perf/token_budget"] = float(self.forward_tokens)
        out["perf/peak_memory_gib"] = peak_bytes(str(param.device)) / 2**30
        if self.spec.budget_plan is not None:
            largest = max((p.batch.num_real_tokens for parts in micro for p in parts if p.rows), default=0)
            passes = recompute_old or self._use_kl
            lp_tokens = min(max(b.num_real_tokens for b in mini_batches), self.logprob_forward_tokens or 2**62)
            plan = self.spec.budget_plan
            resident = self._planned_resident - (plan.optimizer_state if first_step else 0.0)  # made by this step
            planned = max(plan.peak(resident, largest, lp_tokens if passes else 0,
                                    micro_batches=max(len(parts) for parts in micro)),
                          self._planned_resident + plan.other_peak)
            # Beside the high-water mark, which only grows: the plan's peak of every step so far.
            self._planned_peak = max(self._planned_peak, planned)
            out["perf/planned_memory_gib"] = self._planned_peak / 2**30
        loss_tokens = float(sum(int(b.completion_mask.sum()) for b in trained))
        rank_totals = {"real_tokens": real, "capacity": capacity, "loss_tokens": loss_tokens, "rows": out["packing/rows"]}
        return self.strategy.combine_metrics(out, rank_totals)

    def skip_step(self) -> None:
        """A step with nothing to learn from (every group filtered): the schedule and step count
        still advance, so the LR, the Polyak cadence and checkpoints stay aligned with the loop."""
        self._advance_schedule()
        self._finish_step()

    def _advance_schedule(self) -> None:
        with warnings.catch_warnings():  # stepping the schedule without an update is intended here
            warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step\\(\\)` before")
            self.scheduler.step()

    def _finish_step(self) -> None:
        self.steps += 1
        kl_cfg = self.spec.kl
        polyak = self.reference is not None and kl_cfg.reference == "polyak"
        if polyak and self.steps % kl_cfg.ref_policy_update_freq == 0:
            self.strategy.polyak(self.reference, kl_cfg.alpha)

    @property
    def _use_kl(self) -> bool:
        return self.beta > 0 and self.reference is not None and self.kl is not None

    def _logprobs(self, model: torch.nn.Module, index: int, batch: PackedBatch, pieces: MicroBatches) -> torch.Tensor:
        """No-grad log-probs ``[R, L]`` of mini-batch ``index`` under ``model``, in micro-batches
        under ``learner.max_tokens_per_logprob_forward``."""
        parts = pieces.split(index, batch, self.logprob_forward_tokens)
        real = [p for p in parts if p.rows]
        with torch.no_grad():
            out = assemble_rows(
                batch, [p.rows for p in real], [p.batch for p in real],
                lambda part: self._policy_logprobs(model, part, pieces.layout_of(part)),
            )
            for pad in parts[len(real):]:  # keeps this rank's forwards in step with the others'
                self._policy_logprobs(model, pad.batch, pad.layout)
        return out

    def _policy_logprobs(self, model: Any, batch: PackedBatch, layout: SequenceLayout) -> torch.Tensor:
        return self._completion_logprobs_autocast(model, batch, layout, entropy=False)[0]

    def _forward(self, batch: PackedBatch, layout: SequenceLayout) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Policy log-probs of the loss tokens (with grad) and, when ``algorithm.log_entropy``, their
        entropy (no grad); 0 elsewhere."""
        model, entropy = self.strategy.train_module, self.spec.algorithm.log_entropy
        return self._completion_logprobs_autocast(model, batch, layout, entropy=entropy)

    def _completion_logprobs_autocast(
        self, model: Any, batch: PackedBatch, layout: SequenceLayout, *, entropy: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """:func:`completion_logprobs` of ``model`` at the learner's temperature, under autocast to
        the spec's ``model.autocast_dtype`` when mixed precision is on."""
        low = self.spec.model.autocast_dtype  # mixed precision: weights stay fp32, matmuls run in bf16
        region = torch.autocast(batch.input_ids.device.type, dtype=low, cache_enabled=False) if low is not None else nullcontext()
        with region:
            return completion_logprobs(model, batch, temperature=self.temperature, layout=layout, entropy=entropy)

    def _update(
        self, parts: Sequence[MicroBatch], old: torch.Tensor | None, ref: torch.Tensor | None, normaliser: LossNormaliser
    ) -> dict[str, float]:
        """One optimizer step on a mini-batch: each micro-batch's forward and backward add to the
        gradient (synchronised over ranks in the last one), then clipping and the step."""
        self.strategy.zero_grad()
        metrics = MicroMetrics()
        for j, part in enumerate(parts):
            with self.strategy.accumulate(last=j == len(parts) - 1):
                values = self._micro_update(
                    part.batch, part.layout, take_rows(old, part.rows, part.batch), take_rows(ref, part.rows, part.batch),
                    normaliser,
                )
            if part.rows:  # padding micro-batches (to match other ranks) carry nothing to measure
                metrics.add(values, part.batch.completion_mask.sum())
        grad_norm, stepped = self.strategy.step()  # a non-finite gradient is dropped, not applied
        self._advance_schedule()  # with or without the update (see the module docstring)
        out = metrics.result()
        out["optim/grad_norm"] = float(grad_norm)
        out["optim/lr"] = self.scheduler.get_last_lr()[0]
        out[SKIPPED_UPDATES] = 0.0 if stepped else 1.0
        return out

    def _micro_update(
        self,
        batch: PackedBatch,
        layout: SequenceLayout,
        old: torch.Tensor | None,
        ref: torch.Tensor | None,
        normaliser: LossNormaliser,
    ) -> dict[str, Any]:
        """Forward, loss and backward of one micro-batch; its share of the mini-batch's losses."""
        alg, kl_cfg = self.spec.algorithm, self.spec.kl
        logprobs, entropy = self._forward(batch, layout)
        mask, seq_ids, num_seqs = batch.completion_mask, batch.seq_ids, batch.num_seqs
        engine_logprobs = batch.engine_logprobs
        if alg.use_engine_logprobs_as_old or alg.mismatch_correction != "none":
            engine_logprobs = sampled_engine_logprobs(engine_logprobs, mask)
        if alg.use_engine_logprobs_as_old:
            old = engine_logprobs
        elif old is None:
            old = logprobs.detach()
        # Tensors stay tensors until the mini-batch is done (MicroMetrics): no device sync per micro-batch.
        metrics: dict[str, Any] = {}
        advantages = batch.advantages
        if ref is not None and kl_cfg.placement == "reward":
            penalty_kl = self.kl(old, ref)
            advantages, kl_metrics = kl_reward_advantages(advantages, penalty_kl, self.beta, mask, seq_ids, num_seqs)
            metrics.update(kl_metrics)
        out = self.loss(LossInputs(logprobs, old, advantages, mask, seq_ids, num_seqs))
        metrics.update({f"loss/{k}": v.detach() if isinstance(v, torch.Tensor) else float(v) for k, v in out.metrics.items()})
        per_token = out.per_token_loss
        if alg.mismatch_correction != "none":
            weights, mismatch_metrics = mismatch_weights(
                old, engine_logprobs, mask, seq_ids, num_seqs,
                alg.mismatch_correction, alg.mismatch_upper, alg.mismatch_lower,
            )
            per_token = per_token * weights
            metrics.update(mismatch_metrics)
        policy_loss = normaliser.reduce(per_token, mask, seq_ids, num_seqs)
        total = policy_loss
        if ref is not None and kl_cfg.placement == "loss":
            kl_loss = normaliser.reduce(self.kl(logprobs, ref), mask, seq_ids, num_seqs)
            total = total + self.beta * kl_loss
            metrics["loss/kl"] = kl_loss.detach()
        self.strategy.backward(nan_gradient_unless_finite(total))
        metrics["loss/policy"] = policy_loss.detach()
        metrics["loss/total"] = total.detach()
        if entropy is not None:  # mean over loss tokens (0 with none)
            metrics["policy/entropy"] = torch.where(mask, entropy, 0.0).sum() / mask.sum().clamp(min=1)
        return metrics

    # -- checkpoints -----------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Optimizer, schedule and step count; the Polyak reference's weights when it has drifted."""
        state: dict[str, Any] = {
            "format": self.strategy.state_format,
            "optimizer": self.strategy.optimizer_state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "steps": self.steps,
        }
        if self.reference is not None and self.spec.kl.reference == "polyak":
            # Full weights on the main rank (gathered where sharded): a checkpoint resumes under
            # any strategy and number of ranks.
            state["reference"] = self.strategy.reference_state_dict(self.reference)
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        saved = state.get("format", "torch")
        if saved != self.strategy.state_format:
            raise UserError(
                f"the checkpoint's optimizer state was saved by a {saved!r} learner and cannot be loaded by "
                f"learner.strategy = {self.strategy.name!r} ({self.strategy.state_format!r}); resume with the strategy it was saved with"
            )
        self.strategy.load_optimizer_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.steps = int(state["steps"])
        if self.reference is not None and state.get("reference") is not None:
            self.strategy.load_reference_state_dict(self.reference, state["reference"])


def _token_budgets(spec: LearnerSpec, policy: torch.nn.Module) -> Budgets:
    """The budgets of ``spec``, an ``"auto"`` one chosen from its memory plan for the policy's device."""
    if spec.budget_plan is None:
        if AUTO in (spec.forward_tokens, spec.logprob_forward_tokens):
            raise ValueError('an "auto" token budget needs the memory plan (LearnerSpec.budget_plan)')
        return Budgets(int(spec.forward_tokens), int(spec.logprob_forward_tokens), "", 0.0)
    device = str(next(policy.parameters()).device)
    chosen = choose_budgets(spec.budget_plan, device, spec.forward_tokens, spec.logprob_forward_tokens)
    if AUTO in (spec.forward_tokens, spec.logprob_forward_tokens):
        get_logger().info("token_budget", tokens=chosen.train, logprob_tokens=chosen.logprob, line=chosen.line)
    return chosen


def nan_gradient_unless_finite(loss: torch.Tensor) -> torch.Tensor:
    """``loss`` itself when it is finite; otherwise a loss whose gradient is NaN everywhere.

    A loss of ``f + inf`` has the finite gradient of ``f``: without this, an update the loss calls
    meaningless would still be applied. Made NaN, the gradient's norm is not finite and the
    strategy drops it (every strategy checks the norm, DeepSpeed inside ZeRO). Multiplying by 1.0
    changes neither a finite loss nor its gradient, and nothing waits for the device here."""
    factor = torch.where(torch.isfinite(loss.detach()), torch.ones_like(loss), torch.full_like(loss, float("nan")))
    return loss * factor


def build_learner(spec: LearnerSpec, **kwargs: Any) -> Learner:
    """Load the policy (and reference) and construct the learner; ``kwargs`` go to its constructor
    (``strategy`` for a data-parallel rank)."""
    model = spec.model
    strategy = kwargs.get("strategy")
    if strategy is not None:  # fsdp2 loads on the CPU and moves one unit at a time as it shards
        model = attrs.evolve(model, device=strategy.load_device(model.device))
        spec = attrs.evolve(spec, model=model)
    if model.lora is not None:
        policy, reference = _lora_policy(spec)
    else:
        policy = model.load(model.policy_from)
        if model.gradient_checkpointing:
            enable_activation_checkpointing(policy)
        # Frozen or Polyak: starts as the initial policy; the strategy loads it after the policy.
        reference = ReferenceLoader(spec) if spec.uses_reference else None
    kl = spec.kl_estimator.build() if spec.kl_estimator is not None else None
    return Learner(spec, policy, reference, spec.loss.build(), kl, **kwargs)


def _lora_policy(spec: LearnerSpec) -> tuple[Any, Any]:
    """The base model at ``path`` with adapters (new, or the checkpoint's when resuming); the
    reference is the same model with the adapters disabled."""
    from grpo_run.core.learner.lora import AdapterDisabledView, wrap_policy

    model = spec.model
    assert model.lora is not None
    base = model.load()
    if model.gradient_checkpointing:
        enable_activation_checkpointing(base)
    policy = wrap_policy(base, model.lora, adapter_from=model.policy_from, seed=model.seed)
    reference = AdapterDisabledView(policy) if spec.uses_reference else None
    return policy, reference

