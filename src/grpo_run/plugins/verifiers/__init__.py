"""Built-in verifiers plugin (registered through the grpo_run entry point 'verifiers')."""

from __future__ import annotations

from grpo_run import Registrar, hookimpl
from grpo_run.plugins.verifiers.math import MathVerifier


@hookimpl
def grpo_run_register_verifiers(register: Registrar) -> None:
    """Register the built-in verifiers."""
    register(MathVerifier)
