"""The part every data-parallel strategy shares: rank shares of the mini-batches, sums over
ranks, rank-0 gathering, and one set of metrics from all ranks."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist

from grpo_run.core.learner.strategies.base import Strategy
from grpo_run.core.learner.strategies.sharding import rank_shares
from grpo_run.core.rollout.packing import SequenceToPack

SHARE_METRICS = ("loss/policy", "loss/total", "loss/kl")
"""Normaliser-weighted losses: each rank's value is its share of the whole batch's loss, times the
number of ranks, so their mean over ranks is the single-process value exactly."""
SAME_ON_EVERY_RANK = ("optim/grad_norm", "optim/lr", "optim/skipped_updates")


class DataParallel(Strategy):
    """A rank of ``world_size`` in the current ``torch.distributed`` process group."""

    def __init__(self, rank: int, world_size: int, device: torch.device) -> None:
        self.rank = rank
        self.world_size = world_size
        self.device = device

    @property
    def reduce_sum(self) -> Callable[[torch.Tensor], torch.Tensor] | None:
        return self._all_reduce_sum

    def _all_reduce_sum(self, value: torch.Tensor) -> torch.Tensor:
        # NCCL reduces only CUDA tensors: move the small counts there and back.
        out = value.to(self.device)
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        return out.to(value.device)

    def max_over_ranks(self, value: int) -> int:
        out = torch.tensor([value], dtype=torch.int64, device=self.device)
        dist.all_reduce(out, op=dist.ReduceOp.MAX)
        return int(out.item())

    def mini_batch_shares(self, seqs: Sequence[SequenceToPack], num_mini_batches: int) -> list[list[SequenceToPack]]:
        return rank_shares(seqs, num_mini_batches, rank=self.rank, world_size=self.world_size)

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        return super().full_state_dict() if self.is_main else None  # replicated: rank 0 has it all

    def optimizer_state_dict(self) -> Any:
        return super().optimizer_state_dict() if self.is_main else None

    def reference_state_dict(self, reference: torch.nn.Module) -> dict[str, torch.Tensor] | None:
        return super().reference_state_dict(reference) if self.is_main else None  # replicated

    def combine_metrics(self, metrics: dict[str, float], totals: Mapping[str, float]) -> dict[str, float]:
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, (metrics, dict(totals)))
        return combine_rank_metrics(gathered)


def combine_rank_metrics(ranks: Sequence[tuple[Mapping[str, float], Mapping[str, float]]]) -> dict[str, float]:
    """Step metrics of the whole data-parallel learner from each rank's ``(metrics, totals)``.

    Losses (:data:`SHARE_METRICS`) are means over ranks (exact); optimizer numbers are rank 0's
    (identical everywhere); row and throughput counts add up; the packing ratio is over all
    ranks' rows; every other metric (loss plugin diagnostics, entropy) is averaged over the ranks
    that had loss tokens, weighted by their count.
    """
    metrics0 = ranks[0][0]
    out: dict[str, float] = {}
    total = {key: sum(t[key] for _, t in ranks) for key in ("real_tokens", "capacity", "loss_tokens", "rows")}
    keys = dict.fromkeys(k for m, _ in ranks for k in m)
    for key in keys:
        if key in SAME_ON_EVERY_RANK:
            out[key] = metrics0[key]
        elif key in SHARE_METRICS:
            out[key] = sum(m.get(key, 0.0) for m, _ in ranks) / len(ranks)
        elif key in ("perf/learner_s", "perf/peak_memory_gib"):
            out[key] = max(m[key] for m, _ in ranks)
        elif key in ("perf/learner_tokens_per_s", "packing/shared_prompt_tokens"):
            out[key] = sum(m.get(key, 0.0) for m, _ in ranks)
        elif key == "packing/rows":
            out[key] = total["rows"]
        elif key == "packing/packed_ratio":
            out[key] = total["real_tokens"] / max(1.0, total["capacity"])
        else:
            weighted = [(m[key], t["loss_tokens"]) for m, t in ranks if key in m and t["loss_tokens"] > 0]
            weight = sum(w for _, w in weighted)
            out[key] = sum(v * w for v, w in weighted) / weight if weight else metrics0.get(key, 0.0)
    return out
