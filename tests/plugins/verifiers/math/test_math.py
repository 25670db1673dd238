"""The ``math`` verifier: real math-verify equivalences, extraction, strict mode, cache, robustness."""

from __future__ import annotations

import pickle
from concurrent.futures import ThreadPoolExecutor

import cachetools
import math_verify
import pytest

from grpo_run import VerifierResult
from grpo_run.core.plugins.registry import ComponentRegistry, Registrar
from grpo_run.plugins.verifiers import grpo_run_register_verifiers
from grpo_run.plugins.verifiers.math import MathVerifier, MathVerifierConfig, last_boxed, parse_gold

ROW: dict = {"id": "t"}


@pytest.fixture(scope="module")
def verifier() -> MathVerifier:
    return MathVerifier(MathVerifierConfig(cache_size=0))


@pytest.fixture(scope="module")
def strict() -> MathVerifier:
    return MathVerifier(MathVerifierConfig(strict=True, cache_size=0))


@pytest.mark.parametrize(
    ("completion", "gold"),
    [
        ("19", "19"),  # a bare number
        ("I think 19.", "19"),  # the last number of a sentence
        ("12+7=19", "19"),
        ("19.0", "19"),
        ("The answer is 19", "19"),
        ("the answer is 19.", "19"),
        ("so x = 19", "19"),
        ("\\boxed{19}", "19"),
        ("We get $\\boxed{19}$ apples.", "19"),
        ("0.5", "\\frac{1}{2}"),
        ("1/2", "0.5"),
        ("$\\frac{1}{2}$", "0.5"),
        ("\\boxed{\\frac{1}{2}}", "1/2"),
        ("0.333333", "\\frac{1}{3}"),  # numeric comparison rounds to 6 places
        ("1,000", "1000"),
        ("\\boxed{x^2}", "x^2"),
        ("The answer is $x^2$", "x^2"),
        ("$2\\pi$", "2\\pi"),
        ("\\boxed{(1,2)}", "(1,2)"),
        ("$\\{1,2\\}$", "\\{2,1\\}"),
        ("19", 19),  # numeric ground truths
        ("0.5", 0.5),
    ],
)
def test_equivalent_answers_score_one(verifier: MathVerifier, completion: str, gold: object) -> None:
    assert verifier.score(completion, gold, ROW) == VerifierResult(score=1.0, metrics={"answer_found": 1.0})


@pytest.mark.parametrize(
    ("completion", "gold"),
    [
        ("18", "19"),
        ("190", "19"),
        ("1.9", "19"),
        ("-19", "19"),
        ("19.5", "19"),
        ("0.33", "\\frac{1}{3}"),
        ("\\boxed{2}", "1/2"),
        ("$x^3$", "x^2"),
        ("\\boxed{19} wait, no: \\boxed{18}", "19"),  # the last box counts
        ("19 apples and 3 pears", "19"),  # the last number counts
    ],
)
def test_different_answers_score_zero(verifier: MathVerifier, completion: str, gold: str) -> None:
    result = verifier.score(completion, gold, ROW)
    assert result.score == 0.0
    assert result.metrics == {"answer_found": 1.0}


CORRECTED = "first \\boxed{10} ... so the answer is \\boxed{12}"


@pytest.mark.parametrize("strict_mode", [False, True], ids=["default", "strict"])
@pytest.mark.parametrize(
    ("completion", "gold", "expected"),
    [
        (CORRECTED, "12", (1.0, 1.0)),
        (CORRECTED, "10", (0.0, 1.0)),
        ("\\boxed{10} wait, no: \\boxed{12}", "12", (1.0, 1.0)),  # math-verify alone: {10, 12}, fails
        ("\\boxed{10} wait, no: \\boxed{12}", "10", (0.0, 1.0)),
        ("<think>x</think><answer>\\boxed{10} no, \\boxed{12}</answer>", "12", (1.0, 1.0)),
        ("<think>x</think><answer>\\boxed{10} no, \\boxed{12}</answer>", "10", (0.0, 1.0)),
        ("\\boxed{10} no, \\fbox{12}", "12", (1.0, 1.0)),  # \\fbox is a box to math-verify too
        ("\\boxed{10} no, \\fbox{12}", "10", (0.0, 1.0)),
        ("\\boxed{10} or rather \\boxed{1", "10", (0.0, 0.0)),  # the last box is cut off: no answer
    ],
)
def test_the_last_final_answer_wins_in_every_mode(
    completion: str, gold: str, expected: tuple[float, float], strict_mode: bool
) -> None:
    verifier = MathVerifier(MathVerifierConfig(strict=strict_mode, cache_size=0))
    score, answer_found = expected
    assert verifier.score(completion, gold, ROW) == VerifierResult(score=score, metrics={"answer_found": answer_found})


MINERVA = (
    "the interest is $0.04 \\cdot 10,000 \\cdot \\frac{1}{2} = \\boxed{200}$ and then "
    "$0.05 \\cdot 10,200 \\cdot \\frac{1}{2} = \\boxed{255}$, so she has $10,455. "
    "Final Answer: The final answer is $10,455$. I hope it is correct."
)


@pytest.mark.parametrize(
    ("completion", "gold", "score"),
    [
        # One box per part: the boxes that only separators join are one answer (a set).
        ("the solutions are \\boxed{(2, 2)} \\quad\\text{and}\\quad \\boxed{(6, 2)}", "(2, 2), (6, 2)", 1.0),
        ("**Final Answer**\n\\[ \\boxed{-2} \\quad and \\quad \\boxed{1} \\]", "-2, 1", 1.0),
        ("\\boxed{1},\\boxed{2},\\boxed{3}", "\\{1, 2, 3\\}", 1.0),
        ("\\boxed{1} or \\boxed{2}", "\\{1, 2\\}", 1.0),
        # ...so listing candidates is no answer to a one-part question, nor extra parts to a set.
        ("\\boxed{1},\\boxed{2},\\boxed{3}", "3", 0.0),
        ("\\boxed{10} or \\boxed{12}", "12", 0.0),
        ("\\boxed{1},\\boxed{2},\\boxed{3}", "\\{1, 2\\}", 0.0),
        # Parts that prose separates: every box together, tried when the gold has several parts.
        ("\\boxed{(3, 3)} \\text{ for part (a) and } \\boxed{(1, 1)}", "(3, 3), (1, 1)", 1.0),
        ("\\boxed{(3, 3)} \\text{ for part (a) and } \\boxed{(1, 1)}", "(1, 1)", 1.0),  # the last answer
        ("\\boxed{(3, 3)} \\text{ for part (a) and } \\boxed{(1, 1)}", "(3, 3)", 0.0),
        ("\\boxed{1} no, wait: \\boxed{3}, \\boxed{2}", "\\{1, 2\\}", 0.0),  # every box is {1, 2, 3}
        # Self-correction still takes the last answer, for a one-part and a several-part gold.
        ("\\boxed{10} ... so \\boxed{12}", "12", 1.0),
        ("\\boxed{1}, \\boxed{3} ... no: \\boxed{1}, \\boxed{2}", "1, 2", 1.0),
        # Minerva's final-answer sentence after the last box beats the intermediate boxes.
        (MINERVA, "10455", 1.0),
        (MINERVA, "255", 0.0),
    ],
)
def test_which_boxes_are_the_answer(verifier: MathVerifier, completion: str, gold: str, score: float) -> None:
    assert verifier.score(completion, gold, ROW) == VerifierResult(score=score, metrics={"answer_found": 1.0})


def test_strict_mode_reads_only_boxes(strict: MathVerifier) -> None:
    assert strict.score(MINERVA, "10455", ROW).score == 0.0  # the sentence is no box
    assert strict.score(MINERVA, "255", ROW).score == 1.0
    assert strict.score("\\boxed{(2, 2)}, \\boxed{(6, 2)}", "(2, 2), (6, 2)", ROW).score == 1.0


@pytest.mark.parametrize(
    "completion",
    ["", "abc", "9" * 5000, "1" * 20000, "\\boxed{", "\\boxed{}", "$$$", "}{", "\x00\x01", "1/0", "\\frac{1}{0}", "NaN",
     "\\boxed{1}" + " " * 50000 + "\\text{" + " " * 50000 + "x \\boxed{2}",  # separators: no quadratic backtracking
     "1, " * 20000 + "2", "1 or " * 20000 + "2", "The answer is " + " " * 50000 + "x"],  # hedges, answer lines: neither
)
def test_garbage_never_raises_and_scores_zero(verifier: MathVerifier, strict: MathVerifier, completion: str) -> None:
    assert verifier.score(completion, "19", ROW).score == 0.0
    assert strict.score(completion, "19", ROW).score == 0.0


def test_no_answer_found_is_reported(verifier: MathVerifier) -> None:
    assert verifier.score("no idea", "19", ROW).metrics == {"answer_found": 0.0}


def test_strict_only_accepts_the_last_box(strict: MathVerifier) -> None:
    assert strict.score("The answer is 19", "19", ROW).score == 0.0
    assert strict.score("19", "19", ROW).score == 0.0
    assert strict.score("so \\boxed{\\frac{38}{2}}.", "19", ROW).score == 1.0
    assert strict.score("\\boxed{18} no, \\boxed{19}", "19", ROW).score == 1.0
    assert strict.score("\\boxed{19} no, \\boxed{18}", "19", ROW).score == 0.0


def test_last_boxed_balances_braces() -> None:
    assert last_boxed("a \\boxed{1} b \\boxed{\\frac{1}{2}} c") == "\\boxed{\\frac{1}{2}}"
    assert last_boxed("\\boxed{\\frac{1}{2}") is None
    assert last_boxed("nothing") is None


def test_gold_is_boxed_so_bare_latex_parses() -> None:
    # math-verify alone finds nothing in a bare "x^2" and reads "2\\pi" as 2.
    assert str(parse_gold("x^2")[0]) == "x**2"
    assert str(parse_gold("2\\pi")[0]) == "2*pi"
    assert str(parse_gold("$\\frac{1}{2}$")[0]) == "1/2"  # already delimited: used as is


def test_bad_ground_truth_raises(verifier: MathVerifier) -> None:
    with pytest.raises(ValueError, match="cannot parse the ground truth ''"):
        verifier.score("19", "  ", ROW)
    with pytest.raises(TypeError, match="string or a number"):
        verifier.score("19", ["19"], ROW)


def test_cache_skips_repeated_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    parse_gold("19")  # gold parses are cached per process; warm it so only completions count
    calls = []
    real_parse = math_verify.parse  # the verifier imports it from math_verify when it runs
    monkeypatch.setattr(math_verify, "parse", lambda text, **kw: calls.append(text) or real_parse(text, **kw))
    cached = MathVerifier(MathVerifierConfig(cache_size=2))
    for _ in range(3):
        assert cached.score("The answer is 19", "19", ROW).score == 1.0
    assert calls == ["The answer is 19"]
    cached.score("20", "19", ROW)
    cached.score("21", "19", ROW)  # evicts "The answer is 19" (capacity 2)
    cached.score("The answer is 19", "19", ROW)
    assert calls.count("The answer is 19") == 2


def test_cache_is_a_cachetools_lru_that_pickles() -> None:
    verifier = MathVerifier(MathVerifierConfig(cache_size=3))
    assert type(verifier._cache) is cachetools.LRUCache and verifier._cache.maxsize == 3
    verifier.score("19", "19", ROW)
    verifier.score("18", "19", ROW)
    clone = pickle.loads(pickle.dumps(verifier))  # a worker process receives the verifier pickled
    assert type(clone._cache) is cachetools.LRUCache
    assert dict(clone._cache) == {("19", "19"): (1.0, 1.0), ("18", "19"): (0.0, 1.0)}
    assert MathVerifier(MathVerifierConfig(cache_size=0))._cache is None


def test_works_outside_the_main_thread(verifier: MathVerifier) -> None:
    # math-verify's own signal.alarm timeouts would raise ValueError here; they are off.
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(verifier.score, "The answer is 0.5", "\\frac{1}{2}", ROW).result().score == 1.0


def test_pickles_and_validates_config() -> None:
    verifier = MathVerifier(MathVerifierConfig(weight=2.0, strict=True))
    clone = pickle.loads(pickle.dumps(verifier))
    assert clone.config == verifier.config
    assert clone.score("\\boxed{19}", "19", ROW).score == 1.0
    with pytest.raises(ValueError):
        MathVerifierConfig(weight=-1.0)
    with pytest.raises(TypeError):
        MathVerifierConfig(strict="yes")


def test_registered_by_the_builtin_plugin() -> None:
    registry = ComponentRegistry()
    grpo_run_register_verifiers(register=Registrar(registry, "verifier", "grpo-run", "0"))
    assert registry.get("verifier", "math") is MathVerifier


def test_r1_answer_block_is_the_answer():
    from grpo_run.plugins.verifiers.math import MathVerifier

    v = MathVerifier(MathVerifier.Config())
    assert v.score("<think>maybe 3, or 7</think><answer>2</answer>", "2", {}).score == 1.0
    assert v.score("<think>2 is tempting</think><answer>5</answer>", "2", {}).score == 0.0


# SmolLM2's eval completions at step 15 of a run scored with math-verify's own verdict: it had
# learned to restate the sum, which math-verify evaluates (docs/real-model.md).
RESTATED = [
    ("8 - 2 =", "6"),
    ("36 - 38 =", "-2"),
    ("The final answer is 73 - 37.", "36"),
    ("$3 \\times 4$", "12"),
    ("\\boxed{2^{10}}", "1024"),
    ("\\boxed{5 - -1}", "6"),
    ("x = 8 - 2", "6"),
]


@pytest.mark.parametrize(("completion", "gold"), RESTATED)
def test_arithmetic_left_to_do_is_not_an_answer_to_a_number(verifier: MathVerifier, completion: str, gold: str) -> None:
    assert verifier.score(completion, gold, ROW) == VerifierResult(score=0.0, metrics={"answer_found": 1.0})
    lenient = MathVerifier(MathVerifierConfig(cache_size=0, allow_expressions=True))
    assert lenient.score(completion, gold, ROW).score == 1.0  # what math-verify alone says


def test_a_final_answer_line_is_read_whole(verifier: MathVerifier) -> None:
    # math-verify's anchor takes "73 - 37" (36); the line says 2, so 2 is compared, in every mode.
    lenient = MathVerifier(MathVerifierConfig(cache_size=0, allow_expressions=True))
    for mode in (verifier, lenient):
        assert mode.score("The final answer is 73 - 37 = 2.", "36", ROW) == VerifierResult(
            score=0.0, metrics={"answer_found": 1.0}
        )
        assert mode.score("The final answer is 73 - 37 = 36.", "36", ROW).score == 1.0


@pytest.mark.parametrize(
    ("completion", "gold"),
    [
        ("8 - 2 = 6", "6"),  # the working, then the value
        ("The answer is -6.", "-6"),  # a sign is a value
        ("1/2", "0.5"),
        ("$\\frac{3}{4}$", "0.75"),
        ("50%", "50"),
        ("1,000", "1000"),
        ("\\boxed{1+\\sqrt{2}}", "1+\\sqrt{2}"),  # the gold is an expression: so may the answer be
        ("$2\\pi$", "2\\pi"),
        ("\\boxed{x^2 + 1}", "x^2+1"),
    ],
)
def test_values_and_expression_golds_still_score(verifier: MathVerifier, completion: str, gold: str) -> None:
    assert verifier.score(completion, gold, ROW).score == 1.0


# Issue 31: right answers that the first version of rule 6 refused (it read the whole extracted
# text for an operator). Plain math-verify credits every one.
ISSUE_31 = [
    ("Multiplying, $9 \\times 6 = 54$.", "54"),  # the last right-hand side is compared
    ("\\boxed{12 - 5 = 7}", "7"),
    ("\\boxed{x = 12 - 5 = 7}", "7"),  # a chain
    ("The angle is \\boxed{45^{\\circ}}.", "45"),  # degrees are a unit
    ("That is $2.5 \\times 10^{4}$ people.", "25000"),  # scientific notation
    ("$-3 \\times 10^{-2}$", "-0.03"),
    ("\\boxed{3^{5}}", "3^{5}"),  # the gold is itself an expression
    ("\\boxed{12.5\\%}", "12.5\\%"),
    ("\\boxed{6 \\, \\text{m}^{2}}", "6"),  # a unit, even with an exponent
]


@pytest.mark.parametrize(("completion", "gold"), ISSUE_31)
def test_values_after_working_or_with_units_score_one(verifier: MathVerifier, completion: str, gold: str) -> None:
    assert verifier.score(completion, gold, ROW) == VerifierResult(score=1.0, metrics={"answer_found": 1.0})


@pytest.mark.parametrize(
    ("completion", "gold"),
    [
        ("\\boxed{7 = 12 - 5}", "7"),  # math-verify compares the right-hand side, 12 - 5
        ("$84 \\div 2$", "42"),  # the LaTeX parser evaluates \\div: read from the text
        ("Answer \\( (9+1) \\)", "$10$"),  # math-verify's test_latex_notation[4]; parentheses are no exception
        ("\\boxed{(40+2)}", "42"),
        ("$10^{3}$", "1000"),  # a power; scientific notation needs 1 <= |d| < 10
        ("$25 \\times 10^{3}$", "25000"),
        ("\\boxed{\\sqrt{2+2}}", "2"),  # arithmetic under a root
        ("\\boxed{\\{40+2\\}}", "42"),  # ... or in a set
    ],
)
def test_arithmetic_in_the_compared_part_scores_zero(verifier: MathVerifier, completion: str, gold: str) -> None:
    assert verifier.score(completion, gold, ROW) == VerifierResult(score=0.0, metrics={"answer_found": 1.0})


@pytest.mark.parametrize(
    ("completion", "gold", "score"),
    [
        ("2 1/2", "2.5", 1.0),  # math-verify: 2 * 1/2 = 1
        ("2 1/2", "1", 0.0),
        ("\\boxed{2 1/2}", "5/2", 1.0),  # math-verify's LaTeX: 3/2
        ("The answer is -2 1/2.", "-2.5", 1.0),
        ("$2\\frac{1}{2}$", "2.5", 1.0),
        ("3", "2 1/2", 0.0),  # a mixed-number gold is 5/2 too
        ("\\boxed{5/2}", "2 1/2", 1.0),
        ("2 3/2", "3.5", 0.0),  # not a mixed number (improper): 2 * 3/2 = 3, as math-verify reads it
        ("1 2/3 of 6 is 10", "10", 1.0),
    ],
)
def test_mixed_numbers(verifier: MathVerifier, completion: str, gold: str, score: float) -> None:
    assert verifier.score(completion, gold, ROW).score == score


@pytest.mark.parametrize(
    ("completion", "gold", "score"),
    [
        ("either 12 or 13", "12", 0.0),
        ("either 12 or 13", "13", 0.0),  # math-verify: 1 (the last number)
        ("The answer is 12 or 13.", "12", 0.0),  # math-verify: 1 (the anchored first number)
        ("It is $12$ or $13$.", "13", 0.0),
        ("11, 12, or 13", "13", 0.0),
        ("1 or 1 or 2", "2", 0.0),
        ("x is 12 or 13", "12, 13", 1.0),  # the set is the answer
        ("I first thought 12 or 13, but it is 12.", "12", 1.0),  # the answer is not in the hedge
    ],
)
def test_hedges_are_no_answer(verifier: MathVerifier, completion: str, gold: str, score: float) -> None:
    assert verifier.score(completion, gold, ROW).score == score


@pytest.mark.parametrize(
    ("completion", "gold", "score"),
    [
        ("The answer is 2\\pi.", "2\\pi", 1.0),  # math-verify reads 2
        ("The answer is 2\\pi.", "2", 0.0),
        ("#### (1, 2]", "(1, 2]", 1.0),
        ("Final answer: x^2 + 1", "x^2+1", 1.0),
        ("The answer is 77/63.", "11/9", 1.0),  # math-verify reads 77/63.0
        ("The answer is 19 apples.", "19", 1.0),  # words: left to math-verify
        ("The answer is 2\\pi.\nLet me check: 2 * 3.14 = 6.28.", "2", 1.0),  # not the last line: math-verify reads 2
    ],
)
def test_a_final_answer_line_in_bare_latex(verifier: MathVerifier, completion: str, gold: str, score: float) -> None:
    assert verifier.score(completion, gold, ROW).score == score
