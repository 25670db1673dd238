"""The pytest plugin's fixtures, its light import, and dispatching a check by registered family."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_run import VerifierConfig
from grpo_run.testing import check_component


class TooBig:
    """Scores 2.0, outside its default [0, 1] range."""

    name = "too-big"
    Config = VerifierConfig

    def __init__(self, config: VerifierConfig) -> None:
        self.config = config

    def score(self, completion: str, ground_truth: object, row: object) -> float:
        return 2.0


def test_check_component_dispatches_on_the_registered_family(grpo_run_registry) -> None:
    check_component(grpo_run_registry.get("kl", "k3"), registry=grpo_run_registry)
    with pytest.raises(AssertionError, match=r"verifier 'too-big': score range"):
        check_component(TooBig, cases=[("x", None, {})], family="verifier")
    with pytest.raises(AssertionError, match=r"component 'too-big': registry: the class is registered in no family"):
        check_component(TooBig, registry=grpo_run_registry)


def test_the_pytest_plugin_imports_nothing_heavy() -> None:
    # pytest loads the plugin in every session: it must not import torch & co. until a check runs.
    heavy = ("torch", "transformers", "numpy", "structlog", "httpx")
    code = f"import sys, grpo_run.testing.pytest_plugin; print([m for m in {heavy!r} if m in sys.modules])"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout == "[]\n"


def test_plugin_fixtures(grpo_run_host, grpo_run_registry, grpo_run_tiny_model_dir: Path) -> None:
    from transformers import AutoTokenizer

    assert grpo_run_registry is grpo_run_host.registry
    assert AutoTokenizer.from_pretrained(grpo_run_tiny_model_dir).decode([]) == ""
    assert json.loads((grpo_run_tiny_model_dir / "config.json").read_text())["hidden_size"] == 32
