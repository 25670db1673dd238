"""Shared fixtures. The example third-party plugins (tests/plugin_dist, tests/loss_dist) must be
pip-installed in the test environment -- `make test` does it; this installs them when missing so
a bare `pytest` works too."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
EXAMPLE_DIST = "grpo-run-example-plugin"
EXAMPLE_DISTS = {EXAMPLE_DIST: "plugin_dist", "grpo-run-example-loss": "loss_dist"}
"""Distribution name -> its source directory under tests/."""


def _ensure_example_plugins() -> None:
    for dist, directory in EXAMPLE_DISTS.items():
        try:
            importlib.metadata.distribution(dist)
        except importlib.metadata.PackageNotFoundError:
            subprocess.run(
                [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", str(TESTS / directory)],
                check=True,
            )
            importlib.invalidate_caches()


_ensure_example_plugins()

# Keep torch to the 2 cores this machine has; tests must not oversubscribe them. Under
# pytest-xdist (`make test` runs two workers) each worker takes one.
os.environ.setdefault("OMP_NUM_THREADS", "1" if os.environ.get("PYTEST_XDIST_WORKER") else "2")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``gpu`` tests need CUDA: skipped cleanly (with the reason) on a machine without it."""
    gpu = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available() is False)")
    for item in gpu:
        item.add_marker(skip)


@pytest.fixture(scope="session")
def plugin_host():
    from grpo_run.core.plugins.host import build_plugin_host

    return build_plugin_host()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A one-layer Llama (hidden 32) with the character tokenizer, saved in Hugging Face format:
    the smallest model a whole training run can use (``model.name_or_path = <this dir>``)."""
    from grpo_run.plugins.models.char_tokenizer import build_char_tokenizer
    from grpo_run.plugins.models.tiny_llama import TinyLlamaSize, build_tiny_llama

    path = tmp_path_factory.mktemp("tiny-model")
    tokenizer = build_char_tokenizer(model_max_length=64)
    size = TinyLlamaSize(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_position_embeddings=64)
    build_tiny_llama(size, tokenizer, seed=0).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
