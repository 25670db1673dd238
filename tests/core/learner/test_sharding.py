"""Rank shares of a rollout batch: every sequence once, the single process's mini-batches, token
balance across ranks, idle batches that carry nothing; and the metrics of several ranks."""

from __future__ import annotations

import pytest

from support.learner import make_seqs, mini_batches

from grpo_run.core.learner.strategies.base import Strategy
from grpo_run.core.learner.strategies.parallel import combine_rank_metrics
from grpo_run.core.learner.strategies.sharding import idle_batch, is_idle, rank_shares
from grpo_run.core.rollout.packing import token_balanced_groups


def test_token_balanced_groups_deal_longest_first_to_the_lightest() -> None:
    # Lengths 9 7 6 5 4 -> LPT: 9 | 7 | 6, then 5 -> the 6-group, 4 -> the 7-group.
    assert token_balanced_groups([5, 9, 4, 7, 6], 3) == [[1], [2, 3], [0, 4]]
    assert token_balanced_groups([3, 3], 5) == [[0], [1]]  # never an empty group
    assert token_balanced_groups([], 2) == []


def test_one_process_mini_batches_are_token_balanced_and_complete() -> None:
    seqs = make_seqs(37, seed=2)
    shares = Strategy().mini_batch_shares(seqs, 4)
    assert len(shares) == 4
    assert sorted(s.seq_id for share in shares for s in share) == [s.seq_id for s in seqs]
    tokens = [sum(len(s) for s in share) for share in shares]
    assert max(tokens) - min(tokens) <= max(len(s) for s in seqs)  # LPT: within one sequence
    assert [len(share) for share in Strategy().mini_batch_shares(seqs[:3], 8)] == [1, 1, 1]
    assert Strategy().mini_batch_shares([], 2) == []


@pytest.mark.parametrize(("n", "count", "world"), [(9, 2, 2), (3, 2, 2), (12, 3, 4), (5, 1, 3)])
def test_ranks_split_exactly_the_single_process_mini_batches(n, count, world) -> None:
    seqs = make_seqs(n, seed=n)
    single = mini_batches(seqs, count, 16, 0)
    shares = [mini_batches(seqs, count, 16, 0, rank=r, world_size=world) for r in range(world)]
    assert all(len(s) == len(single) for s in shares)
    for j, batch in enumerate(single):
        parts = [shares[r][j] for r in range(world)]
        got = sorted(i for p in parts if not is_idle(p) for i in p.source_seq_ids)
        assert got == sorted(batch.source_seq_ids)  # mini-batch j holds the same sequences
        tokens = [p.num_real_tokens for p in parts if not is_idle(p)]
        longest = max(len(s) for s in seqs if s.seq_id in batch.source_seq_ids)
        assert max(tokens) - min(tokens) <= longest or len(tokens) < world


def test_a_rank_without_a_share_gets_an_idle_batch() -> None:
    seqs = make_seqs(3, seed=2)  # 2 mini-batches: one of 2 sequences, one of 1
    single = mini_batches(seqs, 2, 16, 0)
    lone = next(j for j, b in enumerate(single) if b.num_seqs == 1)
    parts = [mini_batches(seqs, 2, 16, 0, rank=r, world_size=2)[lone] for r in range(2)]
    assert [is_idle(b) for b in parts] == [False, True]  # rank 0 takes the sequence, rank 1 idles
    idle = parts[1]
    assert idle.input_ids.tolist() == [[0, 0]] and not bool(idle.completion_mask.any())
    assert float(idle.advantages.abs().sum()) == 0.0
    with pytest.raises(ValueError, match="rank must be in"):
        rank_shares(seqs, 2, rank=2, world_size=2)


def test_idle_batch_loss_and_gradient_are_exactly_zero() -> None:
    from support.learner import tiny_model

    from grpo_run.core.learner.aggregation import LossNormaliser
    from grpo_run.core.learner.logprobs import packed_token_logprobs

    model = tiny_model()
    batch = idle_batch(0)
    logprobs = packed_token_logprobs(model, batch)
    for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"):
        normaliser = LossNormaliser.for_batches([(batch.completion_mask, batch.seq_ids, batch.num_seqs)], mode)
        loss = normaliser.reduce(-logprobs, batch.completion_mask, batch.seq_ids, batch.num_seqs)
        model.zero_grad()
        loss.backward(retain_graph=True)
        assert float(loss.detach()) == 0.0
        assert all(p.grad is None or float(p.grad.abs().max()) == 0.0 for p in model.parameters())


def test_rank_metrics_combine_losses_exactly_and_diagnostics_by_tokens() -> None:
    ranks = [
        ({"loss/policy": 0.3, "loss/total": 0.4, "optim/grad_norm": 1.5, "optim/lr": 1e-3, "loss/clip_frac": 0.2,
          "packing/rows": 2.0, "packing/packed_ratio": 0.9, "perf/learner_s": 1.0, "perf/learner_tokens_per_s": 100.0,
          "packing/shared_prompt_tokens": 12.0},
         {"real_tokens": 90.0, "capacity": 100.0, "loss_tokens": 30.0, "rows": 2.0}),
        ({"loss/policy": -0.1, "loss/total": 0.0, "optim/grad_norm": 1.5, "optim/lr": 1e-3, "loss/clip_frac": 0.6,
          "packing/rows": 1.0, "packing/packed_ratio": 0.5, "perf/learner_s": 2.0, "perf/learner_tokens_per_s": 40.0,
          "packing/shared_prompt_tokens": 5.0},
         {"real_tokens": 25.0, "capacity": 50.0, "loss_tokens": 10.0, "rows": 1.0}),
    ]
    out = combine_rank_metrics(ranks)
    assert out["loss/policy"] == pytest.approx((0.3 - 0.1) / 2, abs=1e-15)
    assert out["loss/total"] == pytest.approx(0.2, abs=1e-15)
    assert out["optim/grad_norm"] == 1.5 and out["optim/lr"] == 1e-3
    assert out["loss/clip_frac"] == pytest.approx((0.2 * 30 + 0.6 * 10) / 40, abs=1e-15)  # 0.3
    assert out["packing/rows"] == 3.0
    assert out["packing/packed_ratio"] == pytest.approx(115 / 150, abs=1e-15)
    assert out["perf/learner_s"] == 2.0 and out["perf/learner_tokens_per_s"] == 140.0
    assert out["packing/shared_prompt_tokens"] == 17.0  # every rank's skipped tokens add up
    # An idle rank (no loss tokens, no diagnostics) still counts its zero loss share.
    idle = ({"loss/policy": 0.0, "loss/total": 0.0, "optim/grad_norm": 1.5, "optim/lr": 1e-3,
             "packing/rows": 0.0, "packing/packed_ratio": 0.0, "perf/learner_s": 0.5, "perf/learner_tokens_per_s": 0.0},
            {"real_tokens": 0.0, "capacity": 0.0, "loss_tokens": 0.0, "rows": 0.0})
    out = combine_rank_metrics([ranks[0], idle])
    assert out["loss/policy"] == pytest.approx(0.15, abs=1e-15) and out["loss/clip_frac"] == 0.2
