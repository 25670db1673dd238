"""The reasoning_gym verifier: the task's own scorer; a raising scorer is a counted error, not a crash."""

from __future__ import annotations

import asyncio

import pytest

reasoning_gym = pytest.importorskip("reasoning_gym")

from grpo_run.core.scoring.scorer import RewardScorer  # noqa: E402
from grpo_run.plugins.verifiers.reasoning_gym import ReasoningGymVerifier, ReasoningGymVerifierConfig  # noqa: E402


@pytest.fixture(scope="module")
def entry():
    return reasoning_gym.create_dataset("chain_sum", size=1, seed=1)[0]  # "4 - 1 - 7 =" -> "-4"


def test_the_answer_in_tags_is_scored_by_the_task(entry):
    verifier = ReasoningGymVerifier()
    gold = {"task": "chain_sum", "entry": entry}
    assert entry["answer"] == "-4"
    assert verifier.score("I think <answer>-4</answer>", gold, {}).score == 1.0
    assert verifier.score("<answer>3</answer> no, <answer>-4</answer>", gold, {}).score == 1.0  # the last tag
    wrong = verifier.score("<answer>4</answer>", gold, {})
    assert wrong.score == 0.0 and wrong.metrics == {"answer_found": 1.0}
    untagged = verifier.score("-4", gold, {})
    assert untagged.score == 0.0 and untagged.metrics == {"answer_found": 0.0}
    assert ReasoningGymVerifier(ReasoningGymVerifierConfig(answer_format="raw")).score(" -4\n", gold, {}).score == 1.0


def test_a_raising_scorer_counts_as_an_error_not_a_crash(entry):
    broken = {"task": "chain_sum", "entry": {"question": entry["question"]}}  # no "answer": the scorer raises
    rows = [{"id": "ok", "ground_truth": {"task": "chain_sum", "entry": entry}, "verifier": "reasoning_gym"},
            {"id": "broken", "ground_truth": broken, "verifier": "reasoning_gym"}]
    with RewardScorer({"reasoning_gym": (ReasoningGymVerifier, ReasoningGymVerifierConfig())}, num_workers=0) as scorer:
        scored = asyncio.run(scorer.score(rows, ["<answer>-4</answer>", "<answer>-4</answer>"]))
    assert [s.reward for s in scored] == [1.0, 0.0]
    assert scored[0].error is None
    assert scored[1].error is not None and "raised KeyError" in scored[1].error
    metrics = scored.metrics()
    assert metrics["verifier/reasoning_gym/errors"] == 1.0 and metrics["verifier/reasoning_gym/calls"] == 2.0


def test_a_row_from_elsewhere_is_an_error():
    with pytest.raises(ValueError, match="ground_truth must be"):
        ReasoningGymVerifier().score("<answer>1</answer>", "1", {})
