""""Solved" asks the task's correctness verifiers, not the whole reward: a format reward beside
``math`` leaves eval accuracy, the solve rate and the active sampler's pass rate as ``math`` says."""

from __future__ import annotations

import asyncio
import json

import pytest
from support.paths import EXAMPLES
from support.scoring_helpers import ExactVerifier, MisbehavingVerifier

from grpo_run import VerifierConfig
from grpo_run.cli.main import main
from grpo_run.core.errors import PluginError
from grpo_run.core.scoring.scorer import RewardScorer
from grpo_run.plugins.verifiers.format import FormatVerifier, FormatVerifierConfig

GOOD_FORMAT = "<think>x</think><answer>7</answer>"
ROWS = [{"id": "a", "ground_truth": "7", "verifier": "exact"},
        {"id": "b", "ground_truth": GOOD_FORMAT, "verifier": "exact"}]


def solved(setting, texts, rows=ROWS, **specs) -> list[bool]:
    verifiers = {"exact": (ExactVerifier, VerifierConfig(weight=1.0)),
                 "format": (FormatVerifier, FormatVerifierConfig(weight=1.0)), **specs}
    with RewardScorer(verifiers, num_workers=0, correctness_verifiers=setting) as scorer:
        results = asyncio.run(scorer.score(rows, texts))
    return [r.solved for r in results]


def test_auto_asks_the_verifiers_the_rows_name_not_the_format_reward() -> None:
    # a: exact right (1) + format wrong (0) = 1 of 2: solved all the same. b: format right, exact wrong.
    assert solved("auto", ["7", GOOD_FORMAT[:-1]]) == [True, False]
    # The whole reward reaching 2 of 2 is what "reward" asks: neither row gets there.
    assert solved("reward", ["7", GOOD_FORMAT[:-1]]) == [False, False]
    assert solved("reward", ["7", GOOD_FORMAT]) == [False, True]
    # A list: the listed verifiers decide (here the format alone).
    assert solved(["format"], ["7", GOOD_FORMAT]) == [False, True]


def test_a_failed_call_of_a_correctness_verifier_is_not_solved() -> None:
    rows = [{"id": "x", "ground_truth": None, "verifier": "flaky"}] * 2
    flaky = {"flaky": (MisbehavingVerifier, VerifierConfig(weight=1.0))}
    assert solved("auto", ["fine", "raise"], rows=rows, **flaky) == [True, False]


def test_rows_only_all_rows_verifiers_score_fall_back_to_the_whole_reward_under_auto_only() -> None:
    rows = [{"id": "n", "ground_truth": None}]  # names no verifier: only the format scores it
    with RewardScorer({"format": (FormatVerifier, FormatVerifierConfig())}, num_workers=0) as scorer:
        assert [r.solved for r in asyncio.run(scorer.score(rows, [GOOD_FORMAT]))] == [True]
        assert scorer.can_solve(rows[0])
    assert solved(["exact"], [GOOD_FORMAT], rows=rows) == [False]  # none of the listed verifiers scored it


def test_unknown_correctness_verifiers_are_refused() -> None:
    with pytest.raises(PluginError, match="correctness_verifiers names verifiers that are not enabled: math"):
        RewardScorer({"exact": (ExactVerifier, VerifierConfig())}, num_workers=0, correctness_verifiers=["math"])


def test_check_names_the_unknown_correctness_verifier(capsys) -> None:
    assert main(["check", str(EXAMPLES / "arithmetic.toml"), "--set", 'scoring.correctness_verifiers=["maths"]']) == 2
    assert ("arithmetic.toml: scoring.correctness_verifiers: names 'maths', not an enabled verifier "
            "(enabled: math)") in capsys.readouterr().err


def _first_metrics(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _run_example(tmp_path, capsys, *sets: str) -> tuple[list[dict], str]:
    out = tmp_path / "run"
    args = [str(EXAMPLES / "arithmetic.toml"), "--output-dir", str(out), "--set", "verifiers.format.weight=1",
            "--set", "train.total_steps=1", "--set", "checkpoint.save_final=false", "--set", "logging.progress=false",
            "--set", "optim.warmup_steps=0"]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 0
    captured = capsys.readouterr()
    return _first_metrics(out), captured.out + captured.err


def test_the_example_with_a_format_reward_keeps_its_starting_accuracy(tmp_path, capsys) -> None:
    metrics, console = _run_example(tmp_path, capsys)
    # 7 of the 200 held-out problems right at start, as without the format reward (the model never
    # writes <think> tags, so the whole reward never reaches its maximum of 2).
    assert metrics[0]["eval/accuracy"] == 0.035
    assert "starting eval/accuracy 0.035" in console
    step = metrics[1]
    assert step["verifier/format/mean_score"] == 0.0 and step["verifier/math/correct_rate"] > 0
    assert step["reward/solve_rate"] == step["verifier/math/correct_rate"]
    assert "can ever count as solved" not in console


def test_reward_mode_and_a_run_that_can_never_be_solved_say_so(tmp_path, capsys) -> None:
    metrics, console = _run_example(tmp_path, capsys, 'scoring.correctness_verifiers="reward"')
    assert metrics[0]["eval/accuracy"] == 0.0 and metrics[1]["reward/solve_rate"] == 0.0
    # The format verifier told to score only rows that name it: the arithmetic rows name math alone.
    metrics, console = _run_example(tmp_path / "never", capsys, 'scoring.correctness_verifiers=["format"]',
                                    "verifiers.format.all_rows=false")
    assert metrics[0]["eval/accuracy"] == 0.0
    warning = ("warning: no eval row can ever count as solved, so eval/accuracy stays 0 and "
               "train.stop_at_eval_accuracy never fires: scoring.correctness_verifiers = ['format'] decides what "
               "is solved (format); name the verifiers that check the answers")
    assert warning in console.splitlines()
    assert any(line.startswith("warning: no train row can ever count as solved") for line in console.splitlines())
