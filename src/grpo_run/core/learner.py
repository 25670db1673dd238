"""The learner: policy-gradient updates on packed rows.

It owns the trainable policy, the optional frozen reference model, the optimizer and the LR
schedule. The loss and KL estimator are plugin objects; this module only computes log-probs,
combines the per-token terms, aggregates and steps.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from grpo_run.core.components import LossInputs
from grpo_run.core.config.schema import OptimSection, RunConfig
from grpo_run.core.logprobs import block_causal_mask, packed_token_logprobs
from grpo_run.core.loss_aggregation import aggregate
from grpo_run.core.packing import PackedBatch, SequenceToPack, split_mini_batches


def lr_lambda(optim: OptimSection, total_steps: int):
    """Multiplier of the base LR at a given optimizer step: linear warm-up, then the schedule."""

    def factor(step: int) -> float:
        if optim.warmup_steps and step < optim.warmup_steps:
            return (step + 1) / optim.warmup_steps
        if optim.lr_scheduler == "constant":
            return 1.0
        span = max(1, total_steps - optim.warmup_steps)
        progress = min(1.0, (step - optim.warmup_steps) / span)
        if optim.lr_scheduler == "linear":
            return 1.0 - progress
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


class Learner:
    """Takes clipped policy-gradient steps on rollout batches."""

    def __init__(
        self,
        cfg: RunConfig,
        policy: torch.nn.Module,
        reference: torch.nn.Module | None,
        loss: Any,
        kl: Any | None,
        pad_token_id: int,
    ) -> None:
        self.cfg = cfg
        self.policy = policy
        self.reference = reference
        self.loss = loss
        self.kl = kl
        self.beta = cfg.kl.beta
        self.pad_token_id = pad_token_id
        self.temperature = cfg.rollout.temperature
        o = cfg.optim
        self.optimizer = torch.optim.AdamW(
            [p for p in policy.parameters() if p.requires_grad],
            lr=o.lr,
            betas=tuple(o.betas),
            eps=o.eps,
            weight_decay=o.weight_decay,
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_lambda(o, cfg.train.total_steps))
        self.steps = 0

    def weights_snapshot(self) -> dict[str, torch.Tensor]:
        """A detached copy of the policy weights, safe to hand to a generator while training goes on."""
        return {k: v.detach().clone() for k, v in self.policy.state_dict().items()}

    def train_step(self, seqs: Sequence[SequenceToPack]) -> dict[str, float]:
        """One optimizer step per mini-batch, ``num_epochs`` times over the rollout batch."""
        alg = self.cfg.algorithm
        start = time.perf_counter()
        param = next(self.policy.parameters())
        mini_batches = [
            b.to(param.device)
            for b in split_mini_batches(seqs, alg.num_mini_batches, alg.pack_length, self.pad_token_id)
        ]
        dtype = param.dtype
        # One block-diagonal mask per mini-batch, shared by the policy, old and reference forwards.
        masks = [block_causal_mask(b.seq_ids, dtype=dtype) for b in mini_batches]
        multi_update = alg.num_epochs * len(mini_batches) > 1
        self.policy.train()
        # pi_old is the policy that sampled. With one update it equals the current policy, so the
        # detached log-probs of the training forward serve (saves a forward). Otherwise compute it
        # once, before any update.
        old = [self._logprobs(self.policy, b, m) if multi_update else None for b, m in zip(mini_batches, masks)]
        refs = [self._logprobs(self.reference, b, m) if self._use_kl else None for b, m in zip(mini_batches, masks)]
        totals: dict[str, float] = {}
        updates = 0
        for _ in range(alg.num_epochs):
            for i, batch in enumerate(mini_batches):
                metrics = self._update(batch, masks[i], old[i], refs[i])
                for k, v in metrics.items():
                    totals[k] = totals.get(k, 0.0) + v
                updates += 1
        self.steps += 1
        elapsed = time.perf_counter() - start
        out = {k: v / updates for k, v in totals.items()}
        real = sum(b.num_real_tokens for b in mini_batches)
        capacity = sum(b.input_ids.numel() for b in mini_batches)
        out["packing/packed_ratio"] = real / max(1, capacity)
        out["packing/rows"] = float(sum(b.input_ids.shape[0] for b in mini_batches))
        out["perf/learner_tokens_per_s"] = real * alg.num_epochs / max(elapsed, 1e-9)
        out["perf/learner_s"] = elapsed
        return out

    @property
    def _use_kl(self) -> bool:
        return self.beta > 0 and self.reference is not None and self.kl is not None

    def _logprobs(self, model: torch.nn.Module, batch: PackedBatch, mask: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return packed_token_logprobs(model, batch, temperature=self.temperature, attention_mask=mask)

    def _update(
        self, batch: PackedBatch, attn_mask: torch.Tensor, old: torch.Tensor | None, ref: torch.Tensor | None
    ) -> dict[str, float]:
        logprobs = packed_token_logprobs(self.policy, batch, temperature=self.temperature, attention_mask=attn_mask)
        mask = batch.completion_mask
        inputs = LossInputs(
            logprobs=logprobs,
            old_logprobs=old if old is not None else logprobs.detach(),
            advantages=batch.advantages,
            mask=mask,
            seq_ids=batch.seq_ids,
            num_seqs=batch.num_seqs,
        )
        out = self.loss(inputs)
        per_token = out.per_token_loss
        metrics: dict[str, float] = {f"loss/{k}": float(v) for k, v in out.metrics.items()}
        mode = self.cfg.algorithm.loss_aggregation
        policy_loss = aggregate(per_token, mask, batch.seq_ids, batch.num_seqs, mode)
        total = policy_loss
        if ref is not None:
            kl = self.kl(logprobs, ref) * mask
            kl_loss = aggregate(kl, mask, batch.seq_ids, batch.num_seqs, mode)
            total = total + self.beta * kl_loss
            metrics["loss/kl"] = float(kl_loss.detach())
        self.optimizer.zero_grad(set_to_none=True)
        total.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.cfg.optim.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        metrics["loss/policy"] = float(policy_loss.detach())
        metrics["loss/total"] = float(total.detach())
        metrics["optim/grad_norm"] = float(grad_norm)
        metrics["optim/lr"] = self.scheduler.get_last_lr()[0]
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(), "steps": self.steps}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.steps = int(state["steps"])
