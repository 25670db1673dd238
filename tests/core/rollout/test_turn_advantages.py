"""``environment.advantage_granularity = "turn"``: returns-to-go per turn, normalised by the
group's trajectory statistics, carried per token through packing and the flat (Ray) encoding;
``"trajectory"`` stays the default and packs exactly as before."""

from __future__ import annotations

import math

import pytest
import torch

from grpo_run.cli.main import main
from grpo_run.core.config.schema import AlgorithmSection
from grpo_run.core.placement.flat import decode_sequences, encode_sequences
from grpo_run.core.rollout.advantages import turn_advantages
from grpo_run.core.rollout.episodes import Episode, Segment, returns_to_go
from grpo_run.core.rollout.packing import pack_sequences
from grpo_run.core.rollout.sequences import RolloutBatch, RolloutGroup, build_sequences
from support.paths import EXAMPLES

NAN = math.nan


def test_returns_to_go_have_golden_numbers():
    # rewards 0.5, 0, 0.25 and a final score 1: G_2 = 0.25 + 1, G_1 = 0 + 0.25 + 1, G_0 = 0.5 + 1.25
    assert returns_to_go([0.5, 0.0, 0.25], 1.0, 3) == (1.75, 1.25, 1.25)
    # discount 0.5: G_2 = 0.25 + 1; G_1 = 0 + 0.5 * 0.25 + 1; G_0 = 0.5 + 0.5 * 0.125 + 1 (F undiscounted)
    assert returns_to_go([0.5, 0.0, 0.25], 1.0, 3, 0.5) == (1.5625, 1.125, 1.25)
    # a third turn cut by the length limit has no reward: it counts 0
    assert returns_to_go([0.5, 0.5], 0.0, 3) == (1.0, 0.5, 0.0)


def test_turn_advantages_use_the_group_trajectory_statistics():
    # G_0 = [2, 0, 1]: mean 1, sample std 1 -> turn t of episode i gets G_it - 1 (eps aside)
    adv = turn_advantages([2.0, 0.0, 1.0], [[2.0, 1.5], [0.0], [1.0, 1.0, 0.0]], eps=0.0)
    assert adv == [[1.0, 0.5], [-1.0], [0.0, 0.0, -1.0]]
    # population std of [2, 0, 1] is sqrt(2/3)
    pop = turn_advantages([2.0, 0.0, 1.0], [[2.0, 1.5], [0.0], [1.0]], eps=0.0, std="population")
    assert pop[0][1] == pytest.approx(0.5 / math.sqrt(2 / 3), abs=1e-12)
    assert turn_advantages([2.0, 0.0], [[2.0, 1.0], [0.0]], "centered") == [[1.0, 0.0], [-1.0]]
    assert turn_advantages([1.0, 1.0], [[1.0, 0.5], [1.0]]) == [[0.0, 0.0], [0.0]]  # no spread: nothing to learn


def _episode(ids_per_turn: list[int], returns: tuple[float, ...], reward_turns: tuple[float, ...] = ()) -> Episode:
    """One segment: turn t samples ids_per_turn[t] ids (token 9), then a 2-id bridge (token 8)."""
    ids, lps, sampled, turns = [], [], [], []
    for t, n in enumerate(ids_per_turn):
        ids += [9] * n
        lps += [-0.5] * n
        sampled += [True] * n
        turns += [t] * n
        if t < len(ids_per_turn) - 1:
            ids += [8, 8]
            lps += [NAN, NAN]
            sampled += [False, False]
            turns += [t, t]
    seg = Segment((1, 2), tuple(ids), tuple(lps), tuple(sampled), (), tuple(turns))
    return Episode((seg,), "", "stop", 0, None, 0.0, len(ids_per_turn), (), turn_rewards=reward_turns, returns=returns)


def _batch(episodes: list[Episode], rewards: list[float]) -> RolloutBatch:
    return RolloutBatch(1, [RolloutGroup({"id": "r"}, [1, 2], episodes, rewards, 1.0)], 0.0, {})


def test_each_turn_s_tokens_carry_its_advantage_through_packing():
    alg = AlgorithmSection(advantage_eps=1e-300)  # golden numbers: no eps to speak of
    a = _episode([2, 1], (2.0, 1.5))  # G_0 = 2, G_1 = 1.5
    b = _episode([1], (0.0,))
    c = _episode([1, 1], (1.0, 0.0))
    seqs, _ = build_sequences(_batch([a, b, c], [2.0, 0.0, 1.0]), alg, learner_version=0)
    assert [s.token_advantages for s in seqs] == [(1.0, 1.0, 1.0, 1.0, 0.5), (-1.0,), (0.0, 0.0, 0.0, -1.0)]
    packed = pack_sequences(seqs, 64, 0, minimize_width=False)
    row = packed.advantages[0].tolist()
    # all three in one row, longest first (a: 2 + 5, c: 2 + 4, b: 2 + 1); bridges masked (0)
    assert row == [0, 0, 1, 1, 0, 0, 0.5] + [0, 0, 0, 0, 0, -1] + [0, 0, -1]
    # the Ray / multi-learner route keeps them
    assert [s.token_advantages for s in decode_sequences(encode_sequences(seqs))] == [s.token_advantages for s in seqs]


def test_trajectory_granularity_packs_exactly_as_before():
    alg = AlgorithmSection()
    a, b = _episode([2, 1], ()), _episode([1], ())
    seqs, _ = build_sequences(_batch([a, b], [1.0, 0.0]), alg, learner_version=0)
    assert all(s.token_advantages is None for s in seqs)
    packed = pack_sequences(seqs, 64, 0)
    expected = torch.tensor([[0, 0, 1, 1, 0, 0, 1, 0, 0, -1]], dtype=torch.float64)
    expected = (expected * (0.5 / (math.sqrt(0.5) + alg.advantage_eps))).float()  # rewards 1, 0: mean 0.5, std sqrt(0.5)
    torch.testing.assert_close(packed.advantages, expected, rtol=1e-7, atol=0.0)
    assert "token_advantages" not in encode_sequences(seqs)


def test_turn_granularity_needs_summed_rewards(capsys):
    example = str(EXAMPLES / "calculator-tool.toml")
    assert main(["check", example, "--set", 'environment.advantage_granularity="turn"']) == 0
    assert main(["check", example, "--set", 'environment.advantage_granularity="turn"',
                 "--set", 'environment.reward_combination="last"']) == 2
    err = capsys.readouterr().err
    assert 'environment.advantage_granularity: "turn" needs returns summed over turns' in err
    assert "Traceback" not in err
