"""Shared fixtures. The example third-party plugin (tests/plugin_dist) must be pip-installed in
the test environment -- `make test` does it; this installs it when missing so a bare `pytest`
works too."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
EXAMPLE_DIST = "grpo-run-example-plugin"


def _ensure_example_plugin() -> None:
    try:
        importlib.metadata.distribution(EXAMPLE_DIST)
    except importlib.metadata.PackageNotFoundError:
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", str(TESTS / "plugin_dist")],
            check=True,
        )
        importlib.invalidate_caches()


_ensure_example_plugin()

# Keep torch to the 2 cores this machine has; tests must not oversubscribe them.
os.environ.setdefault("OMP_NUM_THREADS", "2")


@pytest.fixture(scope="session")
def plugin_host():
    from grpo_run.core.plugins import build_plugin_host

    return build_plugin_host()
