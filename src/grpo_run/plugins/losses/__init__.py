"""Built-in losses plugin (registered through the grpo_run entry point 'losses')."""

from __future__ import annotations

from grpo_run import Registrar, hookimpl
from grpo_run.plugins.losses.dapo import DapoLoss


@hookimpl
def grpo_run_register_losses(register: Registrar) -> None:
    """Register the built-in policy losses."""
    register(DapoLoss)
