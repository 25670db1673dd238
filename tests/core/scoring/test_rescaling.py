"""Rescaled verifiers (:class:`grpo_run.RescalesScores`): raw scores from wherever the verifier
runs become scores through one rescaler in the scorer's process, in row order, with its state
kept across calls (and set back from a checkpoint); evaluations leave the state alone."""

from __future__ import annotations

import asyncio

import pytest
from support.rescaled_verifiers import RawConfig, RawNumber

from grpo_run.core.scoring.scorer import RewardScorer

ROWS = [{"id": f"r{i}", "verifier": "raw-number"} for i in range(4)]


def scorer(num_workers: int = 0, **config) -> RewardScorer:
    return RewardScorer({"raw-number": (RawNumber, RawConfig(**config))}, num_workers=num_workers)


def scores(batch) -> list[float]:
    return [s.scores.get("raw-number") for s in batch]


@pytest.mark.parametrize("num_workers", [0, 1])
def test_raw_scores_are_rescaled_in_row_order_with_state_across_calls(num_workers) -> None:
    with scorer(num_workers) as s:
        first = asyncio.run(s.score(ROWS, ["1", "2", "3", "-4"]))
        # 2 x raw + the training calls seen before (0): the worker's raw values are rescaled here.
        assert scores(first) == [2.0, 4.0, 6.0, -8.0] and [r.reward for r in first] == [2.0, 4.0, 6.0, -8.0]
        assert s.state_dict() == {"raw-number": {"calls": 1}}
        evaluated = asyncio.run(s.score(ROWS[:1], ["1"], training=False))
        assert scores(evaluated) == [3.0] and s.state_dict() == {"raw-number": {"calls": 1}}  # used, not moved
        assert scores(asyncio.run(s.score(ROWS[:1], ["1"]))) == [3.0]
        assert s.state_dict() == {"raw-number": {"calls": 2}}
        s.load_state_dict({"raw-number": {"calls": 0}})  # a resumed run's rescaler continues from the checkpoint's
        assert scores(asyncio.run(s.score(ROWS[:1], ["5"]))) == [10.0]


def test_raw_scores_may_leave_the_range_that_rescaled_scores_must_keep() -> None:
    with scorer() as s:
        batch = asyncio.run(s.score(ROWS[:3], ["49", "60", "2e6"]))
    assert scores(batch)[0] == 98.0  # raw 49 is inside [-100, 100] only once rescaled; fine either way
    assert batch[1].error == "raw-number: rescaled score 120.0 is not a finite number in [-100, 100]"
    assert "raw-number: returned score 2000000.0, expected a finite number in [-1e+06, 1e+06]" in batch[2].error


def test_a_rescaler_that_raises_fails_only_its_calls_of_that_scoring_call() -> None:
    with scorer() as s:
        bad = asyncio.run(s.score(ROWS[:2], ["13", "1"]))
        assert [r.error for r in bad] == ["raw-number: rescaling: raised ValueError: unlucky"] * 2
        assert [r.reward for r in bad] == [0.0, 0.0]
        assert scores(asyncio.run(s.score(ROWS[:1], ["1"]))) == [2.0]  # the next call is rescaled as usual


def test_a_scorer_without_rescalers_keeps_no_state() -> None:
    from support.scoring_helpers import ConstVerifier

    with RewardScorer({"const": (ConstVerifier, ConstVerifier.Config())}, num_workers=0) as s:
        asyncio.run(s.score([{"id": "a", "verifier": "const"}], ["x"]))
        assert s.state_dict() == {}
