"""Invariants of the ``math`` verifier over generated answers (hypothesis, derandomized).

* The gold, written as an answer in the usual forms, scores 1: numbers, fractions, decimals,
  percentages, scientific notation, mixed numbers, powers, expressions, intervals, sets, tuples.
* Arithmetic left to do is no answer to a plain-number gold (rule 6); the same arithmetic followed
  by its value is.
* A hedge (``12 or 13``) is no answer to a one-part question, whichever alternative is right.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from grpo_run.plugins.verifiers.math import MathVerifier, MathVerifierConfig

VERIFIER = MathVerifier(MathVerifierConfig(cache_size=0))
ROW: dict = {"id": "property"}
FAST = settings(
    max_examples=25, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)
"""Derandomized and without an example database: the same examples on every run, so CI cannot
flake (and nothing is written to the tree); 25 examples keep each test near a second."""

ANSWER_FORMS = ("\\boxed{%s}", "$%s$", "The answer is %s.", "#### %s", "We add them up.\nThe answer is $%s$.")
"""How completions state an answer: boxed, in math mode, a sentence, GSM8K's marker."""

small = st.integers(min_value=1, max_value=999)
signed = st.integers(min_value=-9999, max_value=9999)


@st.composite
def fractions(draw: st.DrawFn) -> str:
    numerator, denominator = draw(signed.filter(bool)), draw(st.integers(2, 99))
    sign = "-" if numerator < 0 else ""
    return draw(st.sampled_from([f"{sign}\\frac{{{abs(numerator)}}}{{{denominator}}}", f"{numerator}/{denominator}"]))


@st.composite
def decimals(draw: st.DrawFn) -> str:
    return f"{draw(signed)}.{draw(st.integers(0, 9999)):d}".replace("--", "-")


@st.composite
def interval(draw: st.DrawFn) -> str:
    low, width = draw(signed), draw(small)
    return draw(st.sampled_from("[(")) + f"{low}, {low + width}" + draw(st.sampled_from("])"))


@st.composite
def sets(draw: st.DrawFn) -> str:
    items = draw(st.lists(signed, min_size=2, max_size=4, unique=True))
    return "\\{" + ", ".join(map(str, items)) + "\\}"


@st.composite
def tuples(draw: st.DrawFn) -> str:
    return "(" + ", ".join(map(str, draw(st.lists(signed, min_size=3, max_size=4)))) + ")"


@st.composite
def expressions(draw: st.DrawFn) -> str:
    a, b = draw(small), draw(small)
    return draw(st.sampled_from([f"{a}x + {b}", f"x^{{{a % 7 + 2}}} - {b}", f"{a}\\pi", f"{b}\\sqrt{{{a * 4 + 2}}}",
                                 f"\\frac{{{a}}}{{x + {b}}}"]))


GOLDS = {
    "number": signed.map(str),
    "fraction": fractions(),
    "decimal": decimals(),
    "percentage": st.tuples(small, st.integers(0, 9)).map(lambda p: f"{p[0]}.{p[1]}\\%"),
    "scientific": st.tuples(st.integers(1, 9), st.integers(1, 9), st.integers(-8, 12)).map(
        lambda p: f"{p[0]}.{p[1]} \\times 10^{{{p[2]}}}"
    ),
    "power": st.tuples(st.integers(2, 12), st.integers(2, 9)).map(lambda p: f"{p[0]}^{{{p[1]}}}"),
    "expression": expressions(),
    "interval": interval(),
    "set": sets(),
    "tuple": tuples(),
}


@pytest.mark.parametrize("kind", GOLDS)
def test_the_gold_written_as_an_answer_scores_one(kind: str) -> None:
    @FAST
    @given(gold=GOLDS[kind], form=st.sampled_from(ANSWER_FORMS))
    def check(gold: str, form: str) -> None:
        assert VERIFIER.score(form % gold, gold, ROW).score == 1.0

    check()


@FAST
@given(whole=st.integers(1, 99), denominator=st.integers(2, 16), data=st.data())
def test_mixed_numbers_are_their_value(whole: int, denominator: int, data: st.DataObject) -> None:
    numerator = data.draw(st.integers(1, denominator - 1))
    value = whole + Fraction(numerator, denominator)
    written = data.draw(st.sampled_from([f"{whole} {numerator}/{denominator}", f"{whole}\\frac{{{numerator}}}{{{denominator}}}"]))
    form = data.draw(st.sampled_from(ANSWER_FORMS))
    gold = data.draw(st.sampled_from([f"{value.numerator}/{value.denominator}", f"{float(value)!r}"]))
    assert VERIFIER.score(form % written, gold, ROW).score == 1.0


OPERATIONS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "\\times": lambda a, b: a * b,
              "\\cdot": lambda a, b: a * b, "*": lambda a, b: a * b, "\\div": lambda a, b: a // b, "^": lambda a, b: a**b}
RESTATED_FORMS = ("\\boxed{%s}", "$%s$", "The answer is %s.", "#### %s", "%s =", "The final answer is $%s$.",
                  "So $x = %s$.", "\\boxed{x = %s}")


@st.composite
def arithmetic(draw: st.DrawFn) -> tuple[str, int]:
    """``a op b`` and its value; a division is written so that its value is a whole number."""
    a, b, op = draw(small), draw(small), draw(st.sampled_from(sorted(OPERATIONS)))
    if op == "\\div":
        a *= b
    if op == "^":
        a, b = a % 9 + 2, b % 5 + 2
    value = OPERATIONS[op](a, b)
    # "1 \cdot 1 =" in plain text is read as its last number, 1: the value itself, not arithmetic.
    assume(value not in (a, b))
    return f"{a} {op} {b}", value


@FAST
@given(restated=arithmetic(), form=st.sampled_from(RESTATED_FORMS))
def test_arithmetic_left_to_do_scores_zero(restated: tuple[str, int], form: str) -> None:
    text, value = restated
    result = VERIFIER.score(form % text, str(value), ROW)
    assert (result.score, result.metrics["answer_found"]) == (0.0, 1.0)


@FAST
@given(restated=arithmetic(), form=st.sampled_from(RESTATED_FORMS[:2] + ("%s", "We get $%s$.")))
def test_arithmetic_then_its_value_scores_one(restated: tuple[str, int], form: str) -> None:
    text, value = restated
    assert VERIFIER.score(form % f"{text} = {value}", str(value), ROW).score == 1.0


HEDGE_FORMS = ("either %s or %s", "%s or %s", "The answer is %s or %s.", "#### %s or %s",
               "\\boxed{%s} or \\boxed{%s}", "$%s$ or $%s$", "The answer is $%s$ or $%s$.")


@FAST
@given(gold=signed, other=signed, gold_first=st.booleans(), form=st.sampled_from(HEDGE_FORMS))
def test_a_hedge_is_not_credited(gold: int, other: int, gold_first: bool, form: str) -> None:
    if gold == other:
        other += 1
    pair = (gold, other) if gold_first else (other, gold)
    result = VERIFIER.score(form % pair, str(gold), ROW)
    assert (result.score, result.metrics["answer_found"]) == (0.0, 1.0)
