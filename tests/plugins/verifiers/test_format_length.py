"""The reward-shaping verifiers: ``format`` (additive and gate), ``length`` (target reward and
DAPO over-long penalty) and ``non_stop_penalty``, alone and through the scorer (in-process)."""

from __future__ import annotations

import asyncio
import math

import pytest
from cattrs.errors import ClassValidationError
from support.scoring_helpers import ExactVerifier

from grpo_run import VerifierConfig
from grpo_run.core.config.converter import make_converter
from grpo_run.core.config.schema import RunConfig
from grpo_run.core.scoring.scorer import RewardScorer, ScoredCompletion
from grpo_run.plugins.verifiers.format import FormatVerifier, FormatVerifierConfig
from grpo_run.plugins.verifiers.length import LengthVerifier, LengthVerifierConfig
from grpo_run.plugins.verifiers.non_stop_penalty import NonStopPenaltyConfig, NonStopPenaltyVerifier

GOOD = "<think>2 + 2 makes 4</think>\n<answer>4</answer>"
BAD = "The answer is 4."


def score_rows(scorer: RewardScorer, rows: list[dict], completions: list[str], **kwargs: object) -> list[ScoredCompletion]:
    return asyncio.run(scorer.score(rows, completions, **kwargs))


# -- format ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("<think>a</think><answer>b</answer>", 1.0),
        ("  <think>\nstep 1\nstep 2\n</think>\n\n<answer> 42 </answer>\n", 1.0),
        ("<think></think><answer>x</answer>", 1.0),  # empty reasoning is still the format
        ("<answer>x</answer>", 0.0),  # no reasoning block
        ("<think>a</think>", 0.0),  # no answer block
        ("<think>a</think><answer>  </answer>", 0.0),  # blank answer
        ("<think>a</think><answer>x</answer> and more", 0.0),  # text after the answer
        ("Sure! <think>a</think><answer>x</answer>", 0.0),  # text before the reasoning
        ("<think>a</think>so<answer>x</answer>", 0.0),  # text between the blocks
        ("<answer>x</answer><think>a</think>", 0.0),  # wrong order
        ("<think>a</think><answer>x</answer><answer>y</answer>", 0.0),  # two answers
        ("<think>a <think> b</think><answer>x</answer>", 0.0),  # nested opening tag
        ("<think>a</think><answer>x</answer></answer>", 0.0),
        (BAD, 0.0),
        ("", 0.0),
    ],
)
def test_format_r1_default_tags(completion: str, expected: float) -> None:
    assert FormatVerifier().score(completion, None, {}) == expected


def test_format_configurable_tags() -> None:
    custom = FormatVerifier(FormatVerifierConfig(think_tag="reasoning", answer_tag="final"))
    assert custom.score("<reasoning>r</reasoning> <final>f</final>", None, {}) == 1.0
    assert custom.score(GOOD, None, {}) == 0.0
    answer_only = FormatVerifier(FormatVerifierConfig(think_tag=""))
    assert answer_only.score("<answer>x</answer>", None, {}) == 1.0
    assert answer_only.score(GOOD, None, {}) == 0.0
    opened = FormatVerifier(FormatVerifierConfig(think_opened_in_prompt=True))
    assert opened.score("reasoning...</think><answer>x</answer>", None, {}) == 1.0
    assert opened.score(GOOD, None, {}) == 0.0  # the prompt opened <think>; opening it again is wrong
    for bad in ({"answer_tag": ""}, {"think_tag": "a b"}, {"answer_tag": "<answer>"}):
        with pytest.raises(ValueError, match="must be a tag name"):
            FormatVerifierConfig(**bad)  # type: ignore[arg-type]


def test_format_additive_adds_weight_times_score_to_every_row() -> None:
    specs = {"exact": (ExactVerifier, VerifierConfig(weight=1.0)), "format": (FormatVerifier, FormatVerifierConfig(weight=0.5))}
    scorer = RewardScorer(specs, num_workers=0)
    rows = [{"id": i, "verifier": "exact", "ground_truth": GOOD} for i in range(2)]
    good, bad = score_rows(scorer, rows, [GOOD, BAD])
    assert good == ScoredCompletion(reward=1.5, max_reward=1.5, scores={"exact": 1.0, "format": 1.0})
    assert bad == ScoredCompletion(reward=0.0, max_reward=1.5, scores={"exact": 0.0, "format": 0.0})
    assert scorer.max_possible_score == 1.5


@pytest.mark.parametrize("gate_fail_reward", [0.0, -1.0])
def test_format_gate_sets_the_reward_whatever_it_was(gate_fail_reward: float) -> None:
    specs = {
        "exact": (ExactVerifier, VerifierConfig(weight=3.0)),
        "non_stop_penalty": (NonStopPenaltyVerifier, NonStopPenaltyConfig(weight=2.0)),
        "format": (FormatVerifier, FormatVerifierConfig(mode="gate", gate_fail_reward=gate_fail_reward)),
    }
    scorer = RewardScorer(specs, num_workers=0)
    # (completion, exact's gold, finish reason) -> reward without the gate
    cases = [
        (GOOD, GOOD, "stop"),  # 3 x 1 + 0 = 3 (above 1)
        (GOOD, "other", "stop"),  # 0
        (GOOD, "other", "length"),  # 3 x 0 + 2 x -1 = -2 (negative)
        (GOOD, GOOD, "length"),  # 3 - 2 = 1
        (BAD, BAD, "stop"),  # 3, but the format fails
        (BAD, "other", "stop"),  # 0, format fails
        (BAD, "other", "length"),  # -2, format fails
    ]
    rows = [{"id": i, "verifier": "exact", "ground_truth": gold} for i, (_, gold, _) in enumerate(cases)]
    results = score_rows(scorer, rows, [c for c, _, _ in cases], finish_reasons=[f for _, _, f in cases])
    g = gate_fail_reward
    assert [r.reward for r in results] == [3.0, 0.0, -2.0, 1.0, g, g, g]
    assert [r.gated for r in results] == [False] * 4 + [True] * 3
    assert {r.max_reward for r in results} == {3.0}  # neither the gate nor the penalty adds to it
    assert results[4].scores == {"exact": 1.0, "non_stop_penalty": 0.0, "format": 0.0}


# -- length ------------------------------------------------------------------------------------


def length_score(length: int, **options: object) -> float:
    verifier = LengthVerifier(LengthVerifierConfig(unit="chars", **options))  # type: ignore[arg-type]
    return verifier.score("x" * length, None, {})


@pytest.mark.parametrize(
    ("length", "expected"),
    [
        (100, 1.0),
        (125, 0.5),  # 1 - 25 / 50
        (75, 0.5),
        (60, 0.2),  # 1 - 40 / 50
        (150, 0.0),
        (300, 0.0),
    ],
)
def test_length_target_linear(length: int, expected: float) -> None:
    assert length_score(length, target=100, tolerance=50) == pytest.approx(expected, abs=1e-12)


def test_length_target_gaussian_and_default_tolerance() -> None:
    # exp(-(50 / 50)^2 / 2) = exp(-0.5)
    assert length_score(150, target=100, tolerance=50, decay="gaussian") == pytest.approx(math.exp(-0.5), rel=1e-12)
    assert length_score(100, target=100, tolerance=50, decay="gaussian") == 1.0
    assert length_score(15, target=10) == pytest.approx(0.5, abs=1e-12)  # tolerance 0 means target: 1 - 5 / 10


@pytest.mark.parametrize(
    ("length", "options", "expected"),
    [
        (50, {}, 0.0),
        (80, {}, 0.0),  # Lmax - Lcache = 80: no penalty yet
        (90, {}, -0.5),  # (80 - 90) / 20
        (95, {}, -0.75),
        (100, {}, -1.0),
        (101, {}, -1.0),  # beyond Lmax: the full penalty
        (85, {"overlong_penalty": 0.5}, -0.125),  # 0.5 x (80 - 85) / 20
        (100, {"overlong_buffer": 0}, 0.0),  # no buffer: a step just after Lmax
        (101, {"overlong_buffer": 0}, -1.0),
    ],
)
def test_length_dapo_overlong_penalty(length: int, options: dict, expected: float) -> None:
    config = {"max_length": 100, "overlong_buffer": 20, **options}
    assert length_score(length, **config) == pytest.approx(expected, abs=1e-12)


def test_length_target_and_penalty_add_up_and_declare_their_range() -> None:
    both = {"target": 90, "tolerance": 30, "max_length": 100, "overlong_buffer": 20}
    # (1 - 5 / 30) + (80 - 95) / 20 = 0.8333... - 0.75
    assert length_score(95, **both) == pytest.approx(1.0 - 5.0 / 30.0 - 0.75, abs=1e-12)
    assert LengthVerifierConfig(**both).score_range == (-1.0, 1.0)
    assert LengthVerifierConfig(target=5).score_range == (0.0, 1.0)
    assert LengthVerifierConfig(max_length=5, overlong_penalty=2.0).score_range == (-2.0, 0.0)


def test_length_config_rules() -> None:
    with pytest.raises(ValueError, match="set target .* and/or max_length"):
        LengthVerifierConfig()
    with pytest.raises(ValueError, match="must be <= max_length"):
        LengthVerifierConfig(max_length=10, overlong_buffer=20)


def test_length_in_tokens_through_the_scorer_with_negative_scores() -> None:
    specs = {
        "exact": (ExactVerifier, VerifierConfig()),
        "length": (LengthVerifier, LengthVerifierConfig(weight=2.0, max_length=100, overlong_buffer=20)),
    }
    scorer = RewardScorer(specs, num_workers=0)
    rows = [{"id": i, "verifier": "exact", "ground_truth": "ok"} for i in range(4)]
    results = score_rows(scorer, rows, ["ok", "ok", "no", "ok"], num_tokens=[50, 90, 120, 100])
    # 1 + 2 x 0, 1 + 2 x -0.5, 0 + 2 x -1, 1 + 2 x -1
    assert [r.reward for r in results] == [1.0, 0.0, -2.0, -1.0]
    assert {r.max_reward for r in results} == {1.0}
    # Without token counts the call fails, clearly, and the row keeps the rest of its reward.
    missing = score_rows(scorer, rows[:1], ["ok"])[0]
    assert missing.reward == 1.0 and "needs the completion's token count" in missing.error


# -- non-stop penalty --------------------------------------------------------------------------


def test_non_stop_penalty_additive_and_gate() -> None:
    rows = [{"id": i, "verifier": "exact", "ground_truth": "ok"} for i in range(3)]
    reasons = ["stop", "length", "length"]
    additive = RewardScorer(
        {"exact": (ExactVerifier, VerifierConfig(weight=3.0)), "non_stop_penalty": (NonStopPenaltyVerifier, NonStopPenaltyConfig(weight=0.5))},
        num_workers=0,
    )
    assert [r.reward for r in score_rows(additive, rows, ["ok", "ok", "no"], finish_reasons=reasons)] == [3.0, 2.5, -0.5]
    gate = RewardScorer(
        {"exact": (ExactVerifier, VerifierConfig(weight=3.0)), "non_stop_penalty": (NonStopPenaltyVerifier, NonStopPenaltyConfig(mode="gate"))},
        num_workers=0,
    )
    assert [r.reward for r in score_rows(gate, rows, ["ok", "ok", "no"], finish_reasons=reasons)] == [3.0, 0.0, 0.0]
    unknown = score_rows(gate, rows[:1], ["ok"])[0]  # no finish reason: a failed call, so the gate fails
    assert unknown.reward == 0.0 and "needs the completion's finish reason" in unknown.error


# -- registration and config -------------------------------------------------------------------


def test_registered_and_configured_from_toml_tables(plugin_host) -> None:
    registry = plugin_host.registry
    assert {"format", "length", "non_stop_penalty"} <= set(registry.names("verifier"))
    converter = make_converter(registry)
    cfg = converter.structure(
        {"verifiers": {"format": {"mode": "gate", "gate_fail_reward": -1}, "length": {"max_length": 512, "overlong_buffer": 128}}},
        RunConfig,
    )
    assert cfg.verifiers["format"] == FormatVerifierConfig(mode="gate", gate_fail_reward=-1.0)
    assert cfg.verifiers["length"].score_range == (-1.0, 0.0)
    with pytest.raises(ClassValidationError):
        converter.structure({"verifiers": {"format": {"mode": "gated"}, "length": {}}}, RunConfig)
