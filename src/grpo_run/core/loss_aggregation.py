"""Reduce a per-token loss on packed rows to the scalar the optimizer sees.

* ``"token-mean"``: sum over masked tokens / number of masked tokens (DAPO's token-level loss:
  long sequences weigh in proportion to their length).
* ``"seq-mean-token-mean"``: mean over each sequence's masked tokens, then mean over sequences
  with at least one masked token (the original GRPO objective).
* ``"seq-mean-token-sum"``: sum over each sequence's masked tokens, then mean over sequences with
  at least one masked token (Dr. GRPO style, without length normalisation).

Per-sequence sums use ``index_add`` on ``seq_ids``, so there is no Python loop over sequences.
"""

from __future__ import annotations

from typing import Literal

import torch

AggregationMode = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]
AGGREGATION_MODES: tuple[str, ...] = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")


def aggregate(
    per_token_loss: torch.Tensor,
    mask: torch.Tensor,
    seq_ids: torch.Tensor,
    num_seqs: int,
    mode: AggregationMode = "token-mean",
) -> torch.Tensor:
    """Scalar loss from ``per_token_loss`` (``[R, L]``) over the tokens where ``mask`` (bool ``[R, L]``) is true.

    ``seq_ids`` (long ``[R, L]``) maps each token to its sequence ``0..num_seqs-1`` (-1 on padding;
    only read where ``mask`` is true). Unmasked positions contribute nothing, even if they hold
    inf/NaN. With no masked token at all the result is a zero that still carries the graph.
    """
    if mode not in AGGREGATION_MODES:
        raise ValueError(f"unknown aggregation mode {mode!r}; expected one of {', '.join(AGGREGATION_MODES)}")
    # where, not multiply: a NaN/inf at a masked-out position must not leak into the sum.
    loss = torch.where(mask, per_token_loss, torch.zeros_like(per_token_loss))
    if mode == "token-mean":
        return loss.sum() / mask.sum().clamp(min=1)
    flat_ids = torch.where(mask, seq_ids, torch.zeros_like(seq_ids)).reshape(-1)
    seq_sum = loss.new_zeros(num_seqs).index_add(0, flat_ids, loss.reshape(-1))
    seq_count = loss.new_zeros(num_seqs).index_add(0, flat_ids, mask.reshape(-1).to(loss.dtype))
    has_tokens = seq_count > 0
    if mode == "seq-mean-token-mean":
        seq_sum = seq_sum / seq_count.clamp(min=1)
    return seq_sum.sum() / has_tokens.sum().clamp(min=1)
