"""Built-in tracker plugins (registered through the grpo_run entry point 'trackers').

Each needs its optional extra (``pip install 'grpo-run[tensorboard]'``, ``[wandb]``,
``[mlflow]``); the plugin module itself imports without it, and selecting a tracker whose
package is missing is a config error naming the extra. ``metrics.jsonl`` is always written by
the core, whatever trackers are enabled.
"""

from __future__ import annotations

from grpo_run import Registrar, hookimpl
from grpo_run.plugins.trackers.mlflow import MlflowTracker
from grpo_run.plugins.trackers.tensorboard import TensorBoardTracker
from grpo_run.plugins.trackers.wandb import WandbTracker


@hookimpl
def grpo_run_register_trackers(register: Registrar) -> None:
    """Register the built-in trackers."""
    for tracker in (TensorBoardTracker, WandbTracker, MlflowTracker):
        register(tracker)
