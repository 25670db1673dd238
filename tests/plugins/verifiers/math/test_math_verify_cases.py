"""math-verify's whole test suite, scored by the ``math`` verifier and by plain math-verify.

The cases are data, not code: ``data/math_verify_cases.json`` holds every (gold, model output,
expected verdict) case of the tests of math-verify's sdist (its header names the release, its
sha256 and the licence), read by ``scripts/math_verify_cases.py``. Our verifier is called the way a
run calls it (the model output is the completion, the gold the ground truth); plain math-verify is
``verify(parse(gold), parse(output))`` with its default settings. Every case where either one
disagrees with the expected verdict is listed below and reasoned in docs/verifiers.md.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from math_verify import parse, verify

from grpo_run.plugins.verifiers.math import MathVerifier, MathVerifierConfig

DATA = json.loads((Path(__file__).parent / "data" / "math_verify_cases.json").read_text(encoding="utf-8"))
CASES = DATA["cases"]
DOCS = Path(__file__).parents[4] / "docs" / "verifiers.md"

OURS_DIFFER = {
    "tests/test_all.py::test_number_extraction[6]": "the gold 1,22 is read as the set {1, 22}, not 1.22",
    "tests/test_all.py::test_latex_notation[4]": "(9+1) is arithmetic left to do (rule 6)",
}
"""Where our verdict differs from plain math-verify's (and from the expected one)."""
NON_DEFAULT_OPTIONS = {
    "tests/test_all.py::test_latex_notation[5]": "LaTeX-only extraction",
    "tests/test_all.py::test_latex_notation[6]": "LaTeX-only extraction",
    "tests/test_all.py::test_precision[literal 0]": "precision = 4",
    "tests/test_all.py::test_complex_math_expressions[7]": "precision = 2",
    "tests/test_all.py::test_complex_math_expressions[13]": "precision = 2",
    "tests/test_all.py::test_set_rel_assymetry[2]": "allow_set_relation_comp = True",
    "tests/test_strict.py::test_strict_variable_comparison[1]": "strict = False",
}
"""Where the test passes an option that a run does not: plain math-verify and ours both differ."""


@pytest.fixture(scope="module")
def verifier() -> MathVerifier:
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # unparsable outputs are logged, expectedly
    return MathVerifier(MathVerifierConfig(cache_size=0))


def test_the_data_is_the_whole_suite_with_its_licence() -> None:
    assert len(CASES) == 276 and len({c["source"] for c in CASES}) == 276
    assert "math_verify-0.9.0.tar.gz" in DATA["source"] and "Apache License 2.0" in DATA["source"]
    assert len(DATA["tests_without_cases"]) == 9  # configs, timeouts, string extraction: no gold to score
    sources = {c["source"] for c in CASES}
    assert set(OURS_DIFFER) <= sources and set(NON_DEFAULT_OPTIONS) <= sources


def test_every_difference_is_in_the_docs() -> None:
    docs = DOCS.read_text(encoding="utf-8")
    for source in [*OURS_DIFFER, *NON_DEFAULT_OPTIONS]:
        assert source.split("/", 1)[1] in docs, f"{source} is not reasoned in docs/verifiers.md"
    agree = len(CASES) - len(OURS_DIFFER) - len(NON_DEFAULT_OPTIONS)
    assert f"| ours, with the rules above | {agree} / {len(CASES)} |" in docs
    assert f"| plain math-verify, default settings | {len(CASES) - len(NON_DEFAULT_OPTIONS)} / {len(CASES)} |" in docs


@pytest.mark.parametrize("case", CASES, ids=[c["source"] for c in CASES])
def test_math_verify_case(verifier: MathVerifier, case: dict) -> None:
    source, expected = case["source"], case["expected"]
    plain_expected = 1 - expected if source in NON_DEFAULT_OPTIONS else expected
    ours_expected = 1 - expected if source in OURS_DIFFER or source in NON_DEFAULT_OPTIONS else expected
    assert int(verify(parse(case["gold"]), parse(case["completion"]))) == plain_expected
    assert verifier.score(case["completion"], case["gold"], {"id": source}).score == ours_expected
