"""The example third-party distribution runs its own tests with grpo-run's pytest plugin, which
pytest loads from the installed grpo-run's ``pytest11`` entry point (no conftest involved: the
tests run in the distribution's directory, under its own pytest configuration)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from support.paths import TESTS

DIST = TESTS / "plugin_dist"


def _pytest_in_dist(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GRPO_RUN_"))}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=DIST, env=env, capture_output=True, text=True, timeout=180,
    )


def test_example_plugins_own_tests_pass() -> None:
    result = _pytest_in_dist("tests")
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"^3 passed in ", result.stdout, re.MULTILINE), result.stdout


def test_fixtures_come_from_the_pytest11_plugin() -> None:
    result = _pytest_in_dist("-p", "no:grpo_run", "tests/test_exact_match.py::test_registered_through_the_entry_point")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "fixture 'grpo_run_registry' not found" in result.stdout
