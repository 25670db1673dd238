"""Group advantages and the zero-std filter, against hand-computed numbers."""

from __future__ import annotations

import math

import pytest
import torch

from grpo_run.core.rollout.advantages import group_advantages, groups_with_spread


def test_standard_uses_sample_std() -> None:
    # Group [1, 0, 0, 1]: mean 0.5; deviations +-0.5; sample var = 4 * 0.25 / 3 = 1/3,
    # std = 0.57735; advantages = +-0.5 / 0.57735 = +-0.866025 (population std would give +-1).
    # Group [3, 3, 3, 3]: all equal -> 0 / (0 + eps) = 0.
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [3.0, 3.0, 3.0, 3.0]])
    adv = group_advantages(rewards, "standard", eps=0.0 + 1e-8)
    a = 0.5 / math.sqrt(1 / 3)
    expected = torch.tensor([[a, -a, -a, a], [0.0, 0.0, 0.0, 0.0]])
    torch.testing.assert_close(adv, expected, rtol=0, atol=1e-6)


def test_standard_eps_in_denominator() -> None:
    # [0, 2]: mean 1, sample std = sqrt(2) = 1.414214; eps = 0.5 -> +-1 / 1.914214 = +-0.522408.
    adv = group_advantages(torch.tensor([[0.0, 2.0]]), "standard", eps=0.5)
    torch.testing.assert_close(adv, torch.tensor([[-0.522408, 0.522408]]), rtol=0, atol=1e-6)


def test_centered() -> None:
    # [1, 0, 0, 0]: mean 0.25 -> [0.75, -0.25, -0.25, -0.25]; [2, 4]: mean 3 -> [-1, 1].
    adv = group_advantages(torch.tensor([[1.0, 0.0, 0.0, 0.0]]), "centered")
    torch.testing.assert_close(adv, torch.tensor([[0.75, -0.25, -0.25, -0.25]]), rtol=0, atol=0)
    adv = group_advantages(torch.tensor([[2, 4]]), "centered")  # integer rewards are accepted
    torch.testing.assert_close(adv, torch.tensor([[-1.0, 1.0]]), rtol=0, atol=0)


def test_errors() -> None:
    with pytest.raises(ValueError, match="at least 2 samples"):
        group_advantages(torch.tensor([[1.0], [0.0]]), "standard")
    with pytest.raises(ValueError, match="unknown advantage kind 'zscore'"):
        group_advantages(torch.zeros(2, 2), "zscore")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="num_groups, G"):
        group_advantages(torch.zeros(4), "centered")


# Rows: equal; equal; a spread; a spread; 0.1 + 0.2 vs 0.3 (0.30000000000000004 vs 0.3: a
# rounding difference of 5.6e-17, no spread); 1e6-scale rewards 1.2e-10 apart (relative 1e-16,
# no spread); 1e-6 apart (a real, if small, spread).
SPREAD_ROWS = [
    [1.0, 1.0, 1.0],
    [0.0, 0.0, 0.0],
    [0.0, 1.0, 0.0],
    [0.5, 0.5, 0.25],
    [0.1 + 0.2, 0.3, 0.3],
    [1e6 + 1.2e-10, 1e6, 1e6],
    [0.5, 0.5 + 1e-6, 0.5],
]
SPREAD = [False, False, True, True, False, False, True]


def test_groups_with_spread() -> None:
    rewards = torch.tensor(SPREAD_ROWS, dtype=torch.float64)
    assert groups_with_spread(rewards).tolist() == SPREAD
    assert groups_with_spread(torch.tensor([[2, 2], [2, 3]])).tolist() == [False, True]  # integer rewards
    with pytest.raises(ValueError, match="num_groups, G"):
        groups_with_spread(torch.zeros(4))


@pytest.mark.parametrize(("kind", "std"), [("standard", "sample"), ("standard", "population"), ("centered", "sample")])
def test_groups_without_spread_get_exactly_zero_advantages(kind, std) -> None:
    # Eight rewards of 0.1 average to 0.09999999999999999, so r - mean is 1.4e-17 and the standard
    # advantage 1.4e-17 / (1.5e-17 + 1e-8) ~ 1e-9 unless the group is zeroed as a whole.
    rewards = torch.tensor([[0.1] * 8, [0.1 + 0.2] + [0.3] * 7, [1.0] + [0.0] * 7], dtype=torch.float64)
    adv = group_advantages(rewards, kind, eps=1e-8, std=std)
    assert adv[:2].tolist() == [[0.0] * 8] * 2
    assert adv[2, 0] > 0.8 and (adv[2, 1:] < 0).all()


def test_training_filter_and_active_sampling_refill_agree() -> None:
    # The filter (build_sequences with filter_zero_std_samples) keeps exactly the groups that the
    # refill of active sampling (RolloutGroup.has_spread) keeps; with the filter off, the groups
    # it would drop train with zero advantages.
    from grpo_run.core.config.schema import AlgorithmSection
    from grpo_run.core.rollout.sequences import RolloutBatch, RolloutGroup, build_sequences
    from grpo_run import Completion

    comp = Completion(token_ids=(5, 6), logprobs=(-1.0, -1.0), text="x", finish_reason="stop", policy_version=0)
    groups = [RolloutGroup(row={"id": str(i)}, prompt_ids=[1], completions=[comp] * 3, rewards=r, max_reward=1.0)
              for i, r in enumerate(SPREAD_ROWS)]
    assert [g.has_spread for g in groups] == SPREAD
    batch = RolloutBatch(1, groups, 0.1, {})
    seqs, metrics = build_sequences(batch, AlgorithmSection(), learner_version=0)
    assert len(seqs) == 3 * sum(SPREAD)
    assert metrics["rollout/real_batch_size_ratio"] == pytest.approx(sum(SPREAD) / len(SPREAD))
    seqs, _ = build_sequences(batch, AlgorithmSection(filter_zero_std_samples=False), learner_version=0)
    advantages = [[s.advantage for s in seqs[3 * i : 3 * i + 3]] for i in range(len(SPREAD))]
    assert [adv == [0.0, 0.0, 0.0] for adv in advantages] == [not spread for spread in SPREAD]


def test_population_std_is_open_instructs_choice() -> None:
    # Group [1, 0, 0, 1]: population var = 4 * 0.25 / 4 = 0.25, std = 0.5 -> +-0.5 / 0.5 = +-1
    # (numpy's .std(), as Open Instruct computes it); the sample std gives +-0.866025 above.
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [2.0, 2.0, 2.0, 2.0]])
    adv = group_advantages(rewards, "standard", eps=1e-8, std="population")
    torch.testing.assert_close(adv, torch.tensor([[1.0, -1.0, -1.0, 1.0], [0.0, 0.0, 0.0, 0.0]]), rtol=0, atol=1e-6)
    # A group of one has a population std (0): no error, zero advantage.
    assert group_advantages(torch.tensor([[5.0]]), std="population").tolist() == [[0.0]]
    with pytest.raises(ValueError, match="std kind 'median'"):
        group_advantages(rewards, std="median")  # type: ignore[arg-type]


def test_the_config_chooses_the_std() -> None:
    from grpo_run.core.config.schema import AlgorithmSection
    from grpo_run.core.rollout.sequences import RolloutBatch, RolloutGroup, build_sequences
    from grpo_run import Completion

    comp = Completion(token_ids=(5, 6), logprobs=(-1.0, -1.0), text="x", finish_reason="stop", policy_version=0)
    group = RolloutGroup(row={"id": "a"}, prompt_ids=[1], completions=[comp] * 4, rewards=[1.0, 0.0, 0.0, 1.0],
                         max_reward=1.0)
    batch = RolloutBatch(1, [group], 0.1, {})
    # advantage_eps = 1e-6 (the default): 0.5 / (0.57735 + 1e-6) = 0.8660239; 0.5 / (0.5 + 1e-6) = 0.999998.
    for kind, expected in (("sample", 0.8660239), ("population", 0.999998)):
        seqs, _ = build_sequences(batch, AlgorithmSection(advantage_std=kind), learner_version=0)
        assert [s.advantage for s in seqs] == pytest.approx([expected, -expected, -expected, expected], abs=1e-6)
