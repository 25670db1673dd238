"""The example plugin's own tests, as a plugin author writes them: grpo-run's contract check
(``grpo_run.testing``) on the ``exact-match`` verifier, and the fixtures of grpo-run's pytest plugin.

Run from this directory: ``python -m pytest -q``.
"""

from __future__ import annotations

from grpo_run.testing import check_component, check_verifier
from grpo_run_example_plugin import ExactMatchConfig, ExactMatchVerifier

CASES = [("42", "42", {}), (" 42\n", "42", {}), ("41", "42", {}), ("Paris", "paris", {})]


def test_exact_match_keeps_the_verifier_contract() -> None:
    check_verifier(ExactMatchVerifier, ExactMatchConfig(), CASES, expected=[1.0, 1.0, 0.0, 0.0], timeout_s=1.0)


def test_case_insensitive_through_its_registered_family(grpo_run_registry) -> None:
    config = ExactMatchConfig(case_sensitive=False)
    check_component(ExactMatchVerifier, config, CASES, expected=[1.0, 1.0, 0.0, 1.0], timeout_s=1.0,
                    registry=grpo_run_registry)


def test_registered_through_the_entry_point(grpo_run_registry) -> None:
    entry = grpo_run_registry.entry("verifier", "exact-match")
    assert (entry.cls, entry.distribution) == (ExactMatchVerifier, "grpo-run-example-plugin")
