"""Tiny test-only verifiers for the scoring runtime tests.

They live in a plain module (not a test file, not ``src/``) so worker processes can unpickle them
by reference: pytest puts ``tests/`` on ``sys.path`` (rootdir conftest, "prepend" import mode)
and ``spawn`` children start with the parent's ``sys.path``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any, ClassVar

import attrs

from grpo_run import VerifierConfig, VerifierResult


class ExactVerifier:
    """1.0 when the stripped completion equals ``str(ground_truth)``, else 0.0."""

    name: ClassVar[str] = "exact"
    Config: ClassVar[type] = VerifierConfig

    def __init__(self, config: VerifierConfig) -> None:
        self.config = config

    def score(self, completion: str, ground_truth: Any, row: Mapping[str, Any]) -> float:
        return 1.0 if completion.strip() == str(ground_truth) else 0.0


@attrs.frozen
class ConstConfig(VerifierConfig):
    value: float = 0.5


class ConstVerifier:
    """Always ``config.value`` (as a ``VerifierResult``)."""

    name: ClassVar[str] = "const"
    Config: ClassVar[type] = ConstConfig

    def __init__(self, config: ConstConfig) -> None:
        self.config = config

    def score(self, completion: str, ground_truth: Any, row: Mapping[str, Any]) -> VerifierResult:
        return VerifierResult(score=self.config.value)


class MisbehavingVerifier:
    """Does what the completion says: ``raise``, ``nan``, ``type`` (returns a str), ``big``
    (returns 2.0), ``hang`` (sleeps 60 s), ``exit`` (kills its process), ``skip`` (not
    applicable); anything else scores 1.0 with the process id as a metric."""

    name: ClassVar[str] = "flaky"
    Config: ClassVar[type] = VerifierConfig

    def __init__(self, config: VerifierConfig) -> None:
        self.config = config

    def score(self, completion: str, ground_truth: Any, row: Mapping[str, Any]) -> Any:
        if completion == "raise":
            raise ValueError("boom")
        if completion == "nan":
            return float("nan")
        if completion == "type":
            return "yes"
        if completion == "big":
            return 2.0
        if completion == "hang":
            time.sleep(60)
        if completion == "exit":
            os._exit(3)
        if completion == "skip":
            return VerifierResult(score=0.0, applicable=False)
        return VerifierResult(score=1.0, metrics={"pid": float(os.getpid())})
