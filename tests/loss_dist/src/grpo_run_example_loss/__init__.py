"""A third-party grpo-run plugin that adds one loss, ``reinforce-baseline``.

grpo-run finds this module through the ``grpo_run`` entry point in ``pyproject.toml`` and calls
the registration hook below. The same class also works without the entry point, by import path:
``[loss] name = "grpo_run_example_loss.losses:ReinforceBaselineLoss"``.
"""

from __future__ import annotations

import grpo_run
from grpo_run_example_loss.losses import ReinforceBaselineConfig, ReinforceBaselineLoss

__all__ = ["ReinforceBaselineConfig", "ReinforceBaselineLoss"]


@grpo_run.hookimpl
def grpo_run_register_losses(register: grpo_run.Registrar) -> None:
    """Add ``reinforce-baseline`` to grpo-run's losses."""
    register(ReinforceBaselineLoss)
