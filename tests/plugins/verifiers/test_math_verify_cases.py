"""math-verify's own test cases, scored by the ``math`` verifier: a regression suite for the rule
that picks the answer among several boxes (docs/verifiers.md).

The cases are data, not code: ``data/math_verify_cases.json`` holds a sample of the (gold, model
output, expected verdict) triples of https://github.com/huggingface/Math-Verify ``tests/`` (MIT
License; the file names the commit and each case its test file, test and index), including the
13 that the last-box rule got wrong while plain math-verify got them right ("regressed"). Our
verifier is called the way a run calls it: the model output is the completion, the gold the
ground truth.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo_run.plugins.verifiers.math import MathVerifier, MathVerifierConfig

CASES = json.loads((Path(__file__).parent / "data" / "math_verify_cases.json").read_text(encoding="utf-8"))["cases"]


@pytest.fixture(scope="module")
def verifier() -> MathVerifier:
    return MathVerifier(MathVerifierConfig(cache_size=0))


def test_the_sample_holds_the_regressed_cases() -> None:
    regressed = [c["source"] for c in CASES if c["regressed"]]
    assert len(regressed) == 13 and len(CASES) > 60
    assert "tests/test_all.py::test_math_extraction_additional_cases[17]" in regressed  # Minerva's final answer


@pytest.mark.parametrize("case", CASES, ids=[c["source"] for c in CASES])
def test_math_verify_case(verifier: MathVerifier, case: dict) -> None:
    assert verifier.score(case["completion"], case["gold"], {"id": case["source"]}).score == case["expected"]
