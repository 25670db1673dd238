"""Built-in kl plugin (registered through the grpo_run entry point 'kl')."""

from __future__ import annotations

from grpo_run import Registrar, hookimpl
from grpo_run.plugins.kl.k3 import K3KL


@hookimpl
def grpo_run_register_kl_estimators(register: Registrar) -> None:
    """Register the built-in KL estimators."""
    register(K3KL)
