"""Each rank's share of a rollout batch: the same mini-batches as one process, split by tokens.

Every rank receives the whole rollout batch and computes the same token-balanced mini-batches a
single process would (:func:`~grpo_run.core.rollout.packing.token_balanced_groups`); each
mini-batch's sequences are then dealt to the ranks, again balanced by tokens, and each rank packs
its share (:func:`~grpo_run.core.learner.micro.pack_mini_batch`). So mini-batch ``j`` holds exactly the same sequences under every strategy, and the
gradient averaged over ranks is the single process's (the loss normaliser counts over all ranks).

A rank whose share of a mini-batch is empty (fewer sequences than ranks) still takes part in the
step's collectives: it trains on an *idle batch*, one masked-out sequence of two pad tokens whose
loss and gradient are exactly zero.
"""

from __future__ import annotations

from collections.abc import Sequence

from grpo_run.core.rollout.packing import PackedBatch, SequenceToPack, pack_sequences, token_balanced_groups

IDLE_SEQ_ID = -1
"""``seq_id`` of the one sequence of an idle batch."""


def idle_batch(pad_token_id: int) -> PackedBatch:
    """A batch that carries no loss: one sequence of two pad tokens, completion masked out."""
    idle = SequenceToPack([pad_token_id], [pad_token_id], 0.0, [0.0], seq_id=IDLE_SEQ_ID, loss_mask=False)
    return pack_sequences([idle], 2, pad_token_id)


def is_idle(batch: PackedBatch) -> bool:
    return batch.source_seq_ids == (IDLE_SEQ_ID,)


def rank_shares(
    seqs: Sequence[SequenceToPack], num_mini_batches: int, *, rank: int, world_size: int
) -> list[list[SequenceToPack]]:
    """Rank ``rank``'s share of each of the rollout batch's mini-batches (empty where it has none:
    it trains on an idle batch). Every rank gets the same number of mini-batches."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
    lengths = [len(s) for s in seqs]
    out = []
    for group in token_balanced_groups(lengths, num_mini_batches):
        shares = token_balanced_groups([lengths[i] for i in group], world_size)
        out.append([seqs[group[j]] for j in shares[rank]] if rank < len(shares) else [])
    return out
