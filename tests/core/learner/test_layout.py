"""The stream and virtual stream of a packed batch: length buckets and prompt sharing, by hand."""

from __future__ import annotations

import torch

from grpo_run.core.learner.layout import length_buckets, sequence_layout
from grpo_run.core.learner.logprobs import batch_layout, prompt_prefixes
from grpo_run.core.rollout.packing import SequenceToPack, pack_sequences


def test_length_buckets_group_within_fill() -> None:
    # Longest first; a bucket takes lengths >= 0.75 x its first: 40, 32 | 20, 16 | 8, 8, 7 | 1
    assert length_buckets([8, 40, 20, 1, 32, 16, 8, 7]) == [[1, 4], [2, 5], [0, 6, 7], [3]]


def test_sequence_layout_by_hand() -> None:
    # Row 0: seq 0 at 0..3, seq 1 at 3..5; row 1: seq 2 at 0..4. Row length 6.
    layout = sequence_layout([(0, 0, 3), (0, 3, 5), (1, 0, 4)], row_length=6)
    # Buckets (fill 0.75): [4, 3] then [2]; stream = seq 2, seq 0, seq 1.
    assert layout.token_index.tolist() == [6, 7, 8, 9, 0, 1, 2, 3, 4]
    assert layout.position_ids.tolist() == [[0, 1, 2, 3, 0, 1, 2, 0, 1]]
    assert layout.cu_seqlens.tolist() == [0, 4, 7, 9] and layout.max_seqlen == 4
    first, second = layout.buckets
    assert (first.num_tokens, first.width) == (7, 4)
    assert first.gather.tolist() == [0, 1, 2, 3, 4, 5, 6, 4]  # [2 x 4] slots; padding repeats a first token
    assert first.valid.tolist() == [0, 1, 2, 3, 4, 5, 6]
    assert (second.num_tokens, second.width, second.gather, second.valid) == (2, 2, None, None)


def test_without_shared_prompts_the_virtual_stream_is_the_stream() -> None:
    layout = sequence_layout([(0, 0, 3), (0, 3, 5)], row_length=6, shared_prefixes=[(1, 2), (3, 4)])
    assert not layout.shares and layout.virtual is None and layout.owner_slot is None
    assert layout.num_tokens == layout.num_virtual_tokens == 5
    assert layout.flat_positions() is layout.token_index
    assert layout.stream_of_virtual().tolist() == [0, 1, 2, 3, 4]


def test_shared_prompt_layout_by_hand() -> None:
    # Seq 0 (row 0, 0..5) and seq 1 (row 0, 5..9) start with prompt (1, 2, 3); seq 2 (row 1, 0..3)
    # has prompt (7,). Buckets (fill 0.75): lengths [5, 4] then [3]. Seq 0 comes first: it owns the
    # prompt; seq 1 keeps only its 4th token in the stream.
    layout = sequence_layout([(0, 0, 5), (0, 5, 9), (1, 0, 3)], row_length=10,
                             shared_prefixes=[(1, 2, 3), (1, 2, 3), (7,)])
    assert layout.shares and (layout.num_tokens, layout.num_virtual_tokens) == (9, 12)
    assert layout.token_index.tolist() == [0, 1, 2, 3, 4, 8, 10, 11, 12]
    assert layout.position_ids.tolist() == [[0, 1, 2, 3, 4, 3, 0, 1, 2]]
    # Virtual stream: seq 0 whole, seq 1 = the shared prompt + its own token, seq 2.
    assert layout.virtual.tolist() == [0, 1, 2, 3, 4, 0, 1, 2, 5, 6, 7, 8]
    assert layout.owner.tolist() == [0, 1, 2, 3, 4, 8, 9, 10, 11]
    assert layout.flat_positions().tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12]
    assert layout.sequence_positions().tolist() == [0, 1, 2, 3, 4, 0, 1, 2, 3, 0, 1, 2]
    assert layout.cu_seqlens.tolist() == [0, 5, 9, 12] and layout.max_seqlen == 5
    first, second = layout.buckets
    assert (first.num_tokens, first.width) == (9, 5)
    assert first.slots.tolist() == [0, 1, 2, 3, 4, 0, 1, 2, 5, 0]  # [2 x 5] slots; padding repeats a first token
    assert second.slots.tolist() == [6, 7, 8] and second.gather is None
    # Each stream token's own slot among the 10 + 3 slots.
    assert layout.owner_slot.tolist() == [0, 1, 2, 3, 4, 8, 10, 11, 12]


def test_a_prompt_is_owned_by_the_first_sequence_in_bucket_order() -> None:
    # The longer sequence (index 1) comes first in bucket order and owns the shared prompt.
    layout = sequence_layout([(0, 0, 3), (1, 0, 6)], row_length=6, shared_prefixes=[(5, 6), (5, 6)])
    assert layout.token_index.tolist() == [6, 7, 8, 9, 10, 11, 2]
    assert layout.virtual.tolist() == [0, 1, 2, 3, 4, 5, 0, 1, 6]


def test_batch_prompts_are_the_tokens_before_the_first_completion_token() -> None:
    seqs = [SequenceToPack([4, 5, 6], [7, 8], 1.0, [0.0, 0.0], seq_id=0),
            SequenceToPack([4, 5, 6], [9], -1.0, [0.0], seq_id=1),
            SequenceToPack([4, 5], [6, 7], 0.5, [0.0, 0.0], seq_id=2)]
    batch = pack_sequences(seqs, pack_length=16, pad_token_id=0)
    assert prompt_prefixes(batch) == [(4, 5, 6), (4, 5, 6), (4, 5)]
    shared, plain = batch_layout(batch), batch_layout(batch, share_prompts=False)
    assert (shared.num_tokens, shared.num_virtual_tokens) == (13 - 3, 13)
    assert not plain.shares and plain.num_tokens == 13
    # The same flat positions are covered, whichever layout: every token of every sequence.
    assert sorted(shared.flat_positions().tolist()) == sorted(plain.flat_positions().tolist())
    assert torch.equal(batch.input_ids.flatten()[shared.flat_positions()].sort().values,
                       batch.input_ids.flatten()[plain.token_index].sort().values)
