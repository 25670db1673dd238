"""A third-party grpo-run plugin: an exact-match verifier, installed like any other package."""

from __future__ import annotations

import attrs

import grpo_run


@attrs.frozen
class ExactMatchConfig(grpo_run.VerifierConfig):
    """Options of the ``exact-match`` verifier."""

    case_sensitive: bool = True
    """Compare with case (False lower-cases both sides)."""


class ExactMatchVerifier:
    """Score 1 when the stripped completion equals the ground truth, else 0."""

    name = "exact-match"
    Config = ExactMatchConfig

    def __init__(self, config: ExactMatchConfig) -> None:
        self.config = config

    def score(self, completion, ground_truth, row):
        a, b = completion.strip(), str(ground_truth).strip()
        if not self.config.case_sensitive:
            a, b = a.lower(), b.lower()
        return grpo_run.VerifierResult(score=1.0 if a == b else 0.0)


@grpo_run.hookimpl
def grpo_run_register_verifiers(register):
    register(ExactMatchVerifier)
