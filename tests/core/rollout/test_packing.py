"""First-fit-decreasing packing of prompt+completion sequences into learner rows."""

from __future__ import annotations

import random

import pytest
import torch

from grpo_run.core.rollout.packing import (
    PackedBatch,
    SequenceToPack,
    first_fit_decreasing,
    pack_sequences,
)

PAD = 0


def make_seq(seq_id: int, prompt_len: int, completion_len: int, *, loss_mask: bool = True) -> SequenceToPack:
    """Token values encode (sequence, index) so misplaced tokens are easy to spot."""
    prompt = [1000 * (seq_id + 1) + i for i in range(prompt_len)]
    completion = [1000 * (seq_id + 1) + 500 + i for i in range(completion_len)]
    return SequenceToPack(
        prompt_ids=prompt,
        completion_ids=completion,
        advantage=0.5 * seq_id - 1.0,
        engine_logprobs=[-0.01 * (seq_id + 1) - 0.001 * k for k in range(completion_len)],
        seq_id=100 + seq_id,
        loss_mask=loss_mask,
    )


def check_invariants(seqs: list[SequenceToPack], batch: PackedBatch, pack_length: int) -> None:
    """Every token of every sequence present exactly once, aligned, with restarting positions."""
    rows, width = batch.input_ids.shape
    assert width <= pack_length
    for t in (batch.position_ids, batch.seq_ids, batch.completion_mask, batch.advantages, batch.engine_logprobs):
        assert t.shape == (rows, width)
    assert batch.input_ids.dtype == batch.position_ids.dtype == batch.seq_ids.dtype == torch.long
    assert batch.completion_mask.dtype == torch.bool
    assert batch.advantages.dtype == batch.engine_logprobs.dtype == torch.float32
    assert batch.num_seqs == len(seqs) and batch.source_seq_ids == tuple(s.seq_id for s in seqs)
    assert batch.num_real_tokens == sum(len(s) for s in seqs) == int((batch.seq_ids >= 0).sum())

    covered = torch.zeros(rows, width, dtype=torch.long)
    for i, s in enumerate(seqs):
        r, start, end = batch.spans[i]
        p = len(s.prompt_ids)
        assert end - start == len(s)
        covered[r, start:end] += 1
        assert batch.input_ids[r, start:end].tolist() == s.prompt_ids + s.completion_ids
        assert batch.position_ids[r, start:end].tolist() == list(range(len(s)))
        assert (batch.seq_ids[r, start:end] == i).all()
        # Completion token k sits at start + p + k: the position whose log-prob is predicted from
        # the token just before it (the last prompt token for k = 0).
        comp = slice(start + p, end)
        assert batch.completion_mask[r, start : start + p].sum() == 0
        assert batch.completion_mask[r, comp].tolist() == [s.loss_mask] * len(s.completion_ids)
        if s.loss_mask:
            assert batch.input_ids[r, comp].tolist() == s.completion_ids
            torch.testing.assert_close(batch.engine_logprobs[r, comp], torch.tensor(s.engine_logprobs))
            assert (batch.advantages[r, comp] == s.advantage).all()
    assert covered.max() <= 1  # no overlaps
    pad = batch.seq_ids < 0
    assert torch.equal(covered == 1, ~pad)
    assert (batch.input_ids[pad] == PAD).all() and (batch.position_ids[pad] == 0).all()
    # Off the completion mask, advantages and engine log-probs are 0.
    assert (batch.advantages[~batch.completion_mask] == 0).all()
    assert (batch.engine_logprobs[~batch.completion_mask] == 0).all()
    # Padding only at the end of each row.
    for r in range(rows):
        used = int((~pad[r]).sum())
        assert pad[r, used:].all() and not pad[r, :used].any()


def test_first_fit_decreasing_hand_checked() -> None:
    # Capacity 10, lengths [3, 7, 5, 4, 2, 6]; decreasing: 7(#1) 6(#5) 5(#2) 4(#3) 3(#0) 2(#4).
    #   7 -> new bin A (free 3);  6 -> new bin B (free 4);  5 -> new bin C (free 5)
    #   4 -> A? 3 < 4, no; B (free 0);  3 -> A (free 0);  2 -> A no, B no, C (free 3)
    assert first_fit_decreasing([3, 7, 5, 4, 2, 6], 10) == [[1, 0], [5, 3], [2, 4]]


def test_pack_sequences_known_example() -> None:
    # Same lengths as above: (prompt, completion) = (1,2) (3,4) (2,3) (1,3) (1,1) (2,4).
    seqs = [make_seq(i, p, c) for i, (p, c) in enumerate([(1, 2), (3, 4), (2, 3), (1, 3), (1, 1), (2, 4)])]
    batch = pack_sequences(seqs, pack_length=10, pad_token_id=PAD, minimize_width=False)
    # Rows as in the FFD example: [#1, #0] [#5, #3] [#2, #4] -> used 10, 10, 7.
    assert batch.spans == ((0, 7, 10), (0, 0, 7), (2, 0, 5), (1, 6, 10), (2, 5, 7), (1, 0, 6))
    assert batch.input_ids.shape == (3, 10)
    assert batch.num_real_tokens == 27 and batch.packed_ratio == pytest.approx(27 / 30)
    check_invariants(seqs, batch, 10)
    # Row 0 in full: seq #1 (prompt 3 + completion 4) then seq #0 (prompt 1 + completion 2).
    assert batch.position_ids[0].tolist() == [0, 1, 2, 3, 4, 5, 6, 0, 1, 2]
    assert batch.seq_ids[0].tolist() == [1] * 7 + [0] * 3
    assert batch.completion_mask[0].tolist() == [False] * 3 + [True] * 4 + [False] + [True] * 2


def test_minimize_width_known_example() -> None:
    # 27 tokens need 3 rows; the search starts at capacity max(7, ceil(27 / 3)) = 9. FFD at 9:
    #   7(#1) -> A (free 2); 6(#5) -> B (free 3); 5(#2) -> C (free 4); 4(#3) -> C (free 0);
    #   3(#0) -> A no, B (free 0); 2(#4) -> A (free 0)  => 3 rows of exactly 9, no padding.
    seqs = [make_seq(i, p, c) for i, (p, c) in enumerate([(1, 2), (3, 4), (2, 3), (1, 3), (1, 1), (2, 4)])]
    batch = pack_sequences(seqs, pack_length=10, pad_token_id=PAD)
    assert batch.spans == ((1, 6, 9), (0, 0, 7), (2, 0, 5), (2, 5, 9), (0, 7, 9), (1, 0, 6))
    assert batch.input_ids.shape == (3, 9) and batch.packed_ratio == 1.0
    check_invariants(seqs, batch, 10)


def test_width_is_longest_row_not_pack_length() -> None:
    seqs = [make_seq(0, 2, 3), make_seq(1, 1, 1)]
    batch = pack_sequences(seqs, pack_length=64, pad_token_id=PAD)
    assert batch.input_ids.shape == (1, 7) and batch.packed_ratio == 1.0
    check_invariants(seqs, batch, 64)


def test_loss_mask_false_packs_but_masks() -> None:
    seqs = [make_seq(0, 2, 3), make_seq(1, 2, 2, loss_mask=False)]
    batch = pack_sequences(seqs, pack_length=16, pad_token_id=PAD)
    check_invariants(seqs, batch, 16)
    assert int(batch.completion_mask.sum()) == 3


def test_random_mixes_keep_invariants() -> None:
    rng = random.Random(0)
    for trial in range(20):
        pack_length = rng.choice([16, 40, 97])
        seqs = []
        for i in range(rng.randint(1, 30)):
            p = rng.randint(1, pack_length - 1)
            c = rng.randint(0, pack_length - p)
            seqs.append(make_seq(i, p, c, loss_mask=rng.random() > 0.2))
        batch = pack_sequences(seqs, pack_length, PAD)
        check_invariants(seqs, batch, pack_length)
        # First fit never leaves two rows that could be merged (at the capacity it packed with,
        # which is at least the row width).
        used = sorted(int((batch.seq_ids[r] >= 0).sum()) for r in range(batch.num_rows))
        assert len(used) < 2 or used[0] + used[1] > batch.row_length, trial
        # Tightening the width never adds a row.
        loose = pack_sequences(seqs, pack_length, PAD, minimize_width=False)
        assert batch.num_rows == loose.num_rows and batch.row_length <= loose.row_length


def test_efficiency_on_skewed_mix() -> None:
    # 120 short sequences (20-60 tokens) and 10 long ones (300-700): FFD fills the gaps the long
    # sequences leave with short ones.
    rng = random.Random(1)
    lengths = [rng.randint(20, 60) for _ in range(120)] + [rng.randint(300, 700) for _ in range(10)]
    rng.shuffle(lengths)
    seqs = [make_seq(i, 8, n - 8) for i, n in enumerate(lengths)]
    batch = pack_sequences(seqs, pack_length=1024, pad_token_id=PAD)
    check_invariants(seqs, batch, 1024)
    assert batch.packed_ratio >= 0.95, batch.packed_ratio
    # Many short sequences and one row's worth of slack: the last row's padding is spread thin.
    rng = random.Random(3)
    seqs = [make_seq(i, 20, rng.randint(1, 32)) for i in range(128)]
    batch = pack_sequences(seqs, pack_length=512, pad_token_id=PAD)
    check_invariants(seqs, batch, 512)
    assert batch.packed_ratio >= 0.95, batch.packed_ratio


def test_errors_name_the_sequence() -> None:
    with pytest.raises(ValueError, match=r"sequence 107 has 12 tokens .* more than pack_length=10"):
        pack_sequences([make_seq(1, 2, 2), make_seq(7, 4, 8)], pack_length=10, pad_token_id=PAD)
    with pytest.raises(ValueError, match="sequence 100 has no prompt token"):
        pack_sequences([make_seq(0, 0, 3)], 10, PAD)
    bad = SequenceToPack([1], [2, 3], 1.0, [-0.1], seq_id=5)
    with pytest.raises(ValueError, match="sequence 5 has 2 completion tokens but 1 engine log-probs"):
        pack_sequences([bad], 10, PAD)


def test_empty_batch() -> None:
    batch = pack_sequences([], 8, PAD)
    assert batch.input_ids.shape == (0, 0) and batch.num_seqs == 0 and batch.packed_ratio == 0.0


