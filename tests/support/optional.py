"""Skip marks for tests that need a package a machine may lack (vLLM, DeepSpeed, flash-attn).

``find_spec`` looks for the package without importing it (importing vLLM takes seconds and may
initialise CUDA), so collecting a module stays cheap where the package is there too."""

from __future__ import annotations

import importlib.util

import pytest


def requires(module: str, install: str) -> pytest.MarkDecorator:
    """Skip unless ``module`` can be imported by this interpreter; the reason says how to get it."""
    missing = importlib.util.find_spec(module) is None
    return pytest.mark.skipif(missing, reason=f"needs {module!r} in this interpreter, not installed: {install}")
