"""Reduce a per-token loss on packed rows to the scalar the optimizer sees.

Modes (``algorithm.loss_aggregation``), for any loss plugin:

* ``"token-mean"``: sum over loss tokens / number of loss tokens (DAPO's token-level loss: long
  sequences weigh in proportion to their length).
* ``"seq-mean-token-mean"``: mean over each sequence's loss tokens, then mean over sequences with
  at least one loss token (the original GRPO objective).
* ``"seq-mean-token-sum"``: sum over each sequence's loss tokens, then mean over sequences with at
  least one loss token (no length normalisation).

``algorithm.loss_denominator`` = a positive number C replaces the token count by C (Open
Instruct's constant denominator; Dr. GRPO uses C = a fixed token budget): ``token-mean`` becomes
sum / C and ``seq-mean-token-mean`` each sequence's sum / C, then the mean over sequences. C
stands where the rollout batch's count stands, so it gets the same ``M x world_size`` scale as
the counts below (docs/algorithms.md compares this with Open Instruct and verl).

**Counts cover the whole rollout batch.** With ``num_mini_batches = M > 1`` the counts are taken
over all M mini-batches before the first update (and summed over ranks by ``reduce_sum`` when
there are several), never per mini-batch: every token (sequence) has the same weight in
whichever mini-batch it lands. Each mini-batch is its own optimizer step, so its loss is scaled
by ``M x world_size``: the step then has the scale of a mean over one mini-batch's share of the
tokens (and with M = 1 on one process it is exactly the mean above), and the M losses of an
epoch add up to M times the batch-level objective. The whole computation is one per-token
weight tensor, :meth:`LossNormaliser.token_weights`, so a loss is ``(weights * per_token).sum()``.

Per-sequence sums use ``index_add`` on ``seq_ids``; there is no Python loop over sequences.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import attrs
import torch

AggregationMode = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]
AGGREGATION_MODES: tuple[str, ...] = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")
Denominator = Literal["token"] | float


@attrs.frozen
class LossNormaliser:
    """The fixed counts of one learner step, turned into per-token loss weights."""

    mode: AggregationMode
    denominator: Denominator
    num_tokens: float
    """Loss tokens over every mini-batch (and rank) of the step."""
    num_seqs: float
    """Sequences with at least one loss token over every mini-batch (and rank) of the step."""
    scale: float = 1.0
    """Number of mini-batches x world size (see the module docstring)."""

    @classmethod
    def for_batches(
        cls,
        batches: Sequence[tuple[torch.Tensor, torch.Tensor, int]],
        mode: AggregationMode = "token-mean",
        denominator: Denominator = "token",
        *,
        world_size: int = 1,
        reduce_sum: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> LossNormaliser:
        """Counts over ``batches``: one ``(mask, seq_ids, num_seqs)`` per mini-batch (``[R, L]`` tensors).

        ``reduce_sum`` (e.g. an all-reduce over ranks) receives a float64 ``[2]`` tensor of the
        local (tokens, sequences) counts and returns the global one.
        """
        _check(mode, denominator)
        tokens, seqs = 0, 0
        for mask, seq_ids, num_seqs in batches:
            tokens += int(mask.sum())
            seqs += int(_seq_token_counts(mask, seq_ids, num_seqs, torch.float64).gt(0).sum())
        counts = torch.tensor([tokens, seqs], dtype=torch.float64)
        if reduce_sum is not None:
            counts = reduce_sum(counts)
        return cls(mode, denominator, float(counts[0]), float(counts[1]), float(len(batches) * world_size))

    def token_weights(
        self, mask: torch.Tensor, seq_ids: torch.Tensor, num_seqs: int, dtype: torch.dtype = torch.float32
    ) -> torch.Tensor:
        """Weight of each token of one mini-batch (``[R, L]`` in ``dtype``, 0 off ``mask``)."""
        constant = self.denominator != "token"
        if self.mode == "token-mean":
            count = float(self.denominator) if constant else max(self.num_tokens, 1.0)
            return mask.to(dtype) * (self.scale / count)
        per_seq_scale = self.scale / max(self.num_seqs, 1.0)
        if self.mode == "seq-mean-token-sum":
            return mask.to(dtype) * per_seq_scale
        if constant:  # seq-mean-token-mean with a constant in place of each sequence's length
            return mask.to(dtype) * (per_seq_scale / float(self.denominator))
        counts = _seq_token_counts(mask, seq_ids, num_seqs, dtype)  # [num_seqs]
        lengths = counts[torch.where(mask, seq_ids, torch.zeros_like(seq_ids))]  # [R, L]
        return torch.where(mask, per_seq_scale / lengths.clamp(min=1.0), torch.zeros_like(lengths))

    def reduce(
        self, per_token_loss: torch.Tensor, mask: torch.Tensor, seq_ids: torch.Tensor, num_seqs: int
    ) -> torch.Tensor:
        """``sum(weights * per_token_loss)`` over ``mask``; NaN/inf off the mask do not leak."""
        loss = torch.where(mask, per_token_loss, torch.zeros_like(per_token_loss))
        weights = self.token_weights(mask, seq_ids, num_seqs, loss.dtype)
        return (weights * loss).sum()


def aggregate(
    per_token_loss: torch.Tensor,
    mask: torch.Tensor,
    seq_ids: torch.Tensor,
    num_seqs: int,
    mode: AggregationMode = "token-mean",
    denominator: Denominator = "token",
) -> torch.Tensor:
    """Scalar loss from ``per_token_loss`` (``[R, L]``) of one batch, over the tokens where ``mask`` (bool) is true.

    ``seq_ids`` (long ``[R, L]``) maps each token to its sequence ``0..num_seqs-1`` (-1 on padding;
    only read where ``mask`` is true). Unmasked positions contribute nothing, even if they hold
    inf/NaN. With no masked token at all the result is a zero that still carries the graph.
    """
    normaliser = LossNormaliser.for_batches([(mask, seq_ids, num_seqs)], mode, denominator)
    return normaliser.reduce(per_token_loss, mask, seq_ids, num_seqs)


def _seq_token_counts(mask: torch.Tensor, seq_ids: torch.Tensor, num_seqs: int, dtype: torch.dtype) -> torch.Tensor:
    """Loss tokens of each sequence: ``[num_seqs]``."""
    if num_seqs == 0:
        return torch.zeros(0, dtype=dtype, device=mask.device)
    flat_ids = torch.where(mask, seq_ids, torch.zeros_like(seq_ids)).reshape(-1)
    return torch.zeros(num_seqs, dtype=dtype, device=mask.device).index_add(0, flat_ids, mask.reshape(-1).to(dtype))


def _check(mode: str, denominator: Denominator) -> None:
    if mode not in AGGREGATION_MODES:
        raise ValueError(f"unknown aggregation mode {mode!r}; expected one of {', '.join(AGGREGATION_MODES)}")
    if denominator != "token" and not (isinstance(denominator, (int, float)) and denominator > 0):
        raise ValueError(f'loss denominator must be "token" or a positive number, got {denominator!r}')
