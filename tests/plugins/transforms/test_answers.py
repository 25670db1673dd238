"""The answer transforms: GSM8K's ``#### 72`` and MATH's last ``\\boxed{}`` become the ground truth."""

from __future__ import annotations

import pytest

from grpo_run.plugins.transforms.answers import AnswerTransformConfig, BoxedAnswer, Gsm8kAnswer


@pytest.mark.parametrize(
    ("solution", "answer"),
    [
        ("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72", "72"),
        ("So the total is 1,000 + 200.\n#### 1,200", "1200"),
        ("#### -3.5 ", "-3.5"),
        ("A first #### 1 then\n#### 2", "2"),  # the last marker is the answer
    ],
)
def test_gsm8k_answer(solution, answer):
    row = Gsm8kAnswer(AnswerTransformConfig())({"ground_truth": solution, "prompt": "q"})
    assert row == {"ground_truth": answer, "solution": solution, "prompt": "q"}


@pytest.mark.parametrize(
    ("solution", "answer"),
    [
        ("Thus $x = \\boxed{\\frac{1}{2}}$.", "\\frac{1}{2}"),
        ("\\boxed{3} is wrong; it is \\boxed{ {a}^{2} + 1 }", "{a}^{2} + 1"),
        ("The answer is \\fbox{42}.", "42"),
    ],
)
def test_boxed_answer(solution, answer):
    assert BoxedAnswer(AnswerTransformConfig())({"ground_truth": solution})["ground_truth"] == answer


@pytest.mark.parametrize(
    ("transform", "solution", "message"),
    [
        (Gsm8kAnswer, "no marker", "ground truth 'no marker' has no '#### <answer>' line (transform 'gsm8k')"),
        (Gsm8kAnswer, "#### ", "ground truth '#### ' has no '#### <answer>' line (transform 'gsm8k')"),
        (BoxedAnswer, "\\boxed{1", "ground truth '\\\\boxed{1' has no closed \\boxed{...} (transform 'boxed')"),
        (BoxedAnswer, 7, "ground truth 7 has no closed \\boxed{...} (transform 'boxed')"),
    ],
)
def test_a_missing_answer_is_an_error_or_drops_the_row(transform, solution, message):
    with pytest.raises(ValueError) as e:
        transform(AnswerTransformConfig())({"ground_truth": solution})
    assert str(e.value) == message
    assert transform(AnswerTransformConfig(on_missing="drop"))({"ground_truth": solution}) is None
