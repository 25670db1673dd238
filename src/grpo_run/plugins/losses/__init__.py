"""Built-in losses plugin (registered through the grpo_run entry point 'losses')."""

from __future__ import annotations

from grpo_run import Registrar, hookimpl
from grpo_run.plugins.losses.cispo import CispoLoss
from grpo_run.plugins.losses.dapo import DapoLoss
from grpo_run.plugins.losses.dr_grpo import DrGrpoLoss
from grpo_run.plugins.losses.grpo import GrpoLoss
from grpo_run.plugins.losses.gspo import GspoLoss


@hookimpl
def grpo_run_register_losses(register: Registrar) -> None:
    """Register the built-in policy losses."""
    for loss in (GrpoLoss, DapoLoss, DrGrpoLoss, CispoLoss, GspoLoss):
        register(loss)
