"""Evaluation: the unbiased pass@k estimator against its exact definition, and the evaluator's
greedy accuracy, pass@k and traces with a scripted engine and the real scorer."""

from __future__ import annotations

import asyncio
import json
import math
from fractions import Fraction
from pathlib import Path

import pytest

from support.scoring_helpers import ExactVerifier

from grpo_run import Completion, SamplingParams, VerifierConfig
from grpo_run.core.data.prompts import PromptRow
from grpo_run.core.loop.evaluation import Evaluator, pass_at_k
from grpo_run.core.loop.traces import TraceWriter
from grpo_run.core.scoring.scorer import RewardScorer


def _exact(n: int, c: int, k: int) -> Fraction:
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


@pytest.mark.parametrize("n", range(1, 13))
def test_pass_at_k_is_one_minus_the_chance_that_k_draws_miss(n: int) -> None:
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(float(_exact(n, c, k)), abs=1e-14)


def test_pass_at_k_worked_values() -> None:
    # n = 4 samples, c = 1 correct: pass@1 = 1/4; pass@2 = 1 - C(3,2)/C(4,2) = 1 - 3/6 = 1/2.
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25, abs=1e-15)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5, abs=1e-15)
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 4, 1) == 1.0
    # Large n stays finite where the binomials would be huge: 1 - C(190, 10) / C(200, 10).
    assert pass_at_k(200, 10, 10) == pytest.approx(float(_exact(200, 10, 10)), abs=1e-14)


@pytest.mark.parametrize("n,c,k", [(4, 5, 1), (4, -1, 1), (4, 1, 0), (4, 1, 5)])
def test_pass_at_k_rejects_impossible_counts(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError, match="need 0 <= c <= n and 1 <= k <= n"):
        pass_at_k(n, c, k)


class ScriptedEngine:
    """Greedy: the answer in ``greedy[prompt]``; sampled: the answers in ``samples[prompt]``."""

    def __init__(self, greedy: dict[int, str], samples: dict[int, list[str]]) -> None:
        self.greedy, self.samples = greedy, samples
        self.calls: list[SamplingParams] = []

    async def generate(self, prompts, params: SamplingParams) -> list[list[Completion]]:
        self.calls.append(params)
        out = []
        for p in prompts:
            texts = [self.greedy[p[0]]] if params.greedy else self.samples[p[0]]
            assert len(texts) == params.n
            out.append([Completion(token_ids=tuple(range(len(t))), logprobs=(0.0,) * len(t), text=t,
                                   finish_reason="stop", policy_version=7) for t in texts])
        return out


def _rows() -> list[PromptRow]:
    return [PromptRow({"id": f"e{i}", "ground_truth": str(i), "verifier": "exact"}, [i]) for i in range(3)]


def test_evaluator_reports_greedy_accuracy_pass_at_k_and_writes_traces(tmp_path: Path) -> None:
    # prompt 0: greedy right, 2 of 4 samples right; prompt 1: greedy wrong, 1 of 4; prompt 2: wrong, 0 of 4.
    engine = ScriptedEngine({0: "0", 1: "x", 2: "x"},
                            {0: ["0", "0", "x", "x"], 1: ["x", "1", "x", "x"], 2: ["x", "x", "x", "x"]})
    scorer = RewardScorer({"exact": (ExactVerifier, VerifierConfig())}, num_workers=0)
    writer = TraceWriter(tmp_path, 1, 1_000_000, lambda ids: f"prompt{ids[0]}")
    evaluator = Evaluator(engine, scorer, _rows(), 5, ("\n",), num_samples=4, temperature=0.7, traces=writer)
    metrics = asyncio.run(evaluator.evaluate(step=9))
    assert metrics["eval/accuracy"] == pytest.approx(1 / 3, abs=1e-15)
    assert metrics["eval/pass@1"] == pytest.approx((2 / 4 + 1 / 4 + 0) / 3, abs=1e-15)
    # pass@2: prompt 0 = 1 - C(2,2)/C(4,2) = 5/6; prompt 1 = 1 - C(3,2)/C(4,2) = 1/2.
    assert metrics["eval/pass@2"] == pytest.approx((5 / 6 + 1 / 2 + 0) / 3, abs=1e-15)
    assert metrics["eval/pass@4"] == pytest.approx(2 / 3, abs=1e-15)
    assert metrics["eval/sampled_reward_mean"] == pytest.approx(3 / 12, abs=1e-15)
    assert engine.calls[1] == SamplingParams(n=4, max_new_tokens=5, temperature=0.7, stop_strings=("\n",))
    traces = [json.loads(line) for line in (tmp_path / "rollouts" / "eval_9.jsonl").read_text().splitlines()]
    assert len(traces) == 3 + 12
    assert [(t["prompt"], t["completion"], t["solved"], t["greedy"]) for t in traces[:3]] == [
        ("prompt0", "0", True, True), ("prompt1", "x", False, True), ("prompt2", "x", False, True)]
    assert [(t["group"], t["sample"]) for t in traces[3:7]] == [(0, 0), (0, 1), (0, 2), (0, 3)]
    assert [t["solved"] for t in traces[3:7]] == [True, True, False, False]
    assert {t["policy_version"] for t in traces} == {7} and {t["step"] for t in traces} == {9}


def test_greedy_only_evaluation_samples_nothing_and_writes_no_trace_when_off(tmp_path: Path) -> None:
    engine = ScriptedEngine({0: "0", 1: "1", 2: "x"}, {})
    scorer = RewardScorer({"exact": (ExactVerifier, VerifierConfig())}, num_workers=0)
    writer = TraceWriter(tmp_path, 0, 1_000_000, lambda ids: "")  # log_rollouts_every = 0
    metrics = asyncio.run(Evaluator(engine, scorer, _rows(), 5, traces=writer).evaluate(step=1))
    assert metrics["eval/accuracy"] == pytest.approx(2 / 3, abs=1e-15)
    assert not any(k.startswith("eval/pass@") for k in metrics)
    assert len(engine.calls) == 1 and not (tmp_path / "rollouts").exists()
