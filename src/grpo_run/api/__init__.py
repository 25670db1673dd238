"""The Python API (re-exported by :mod:`grpo_run`): :func:`train`, :func:`sweep`, :func:`load_config`,
:func:`score` and plain reward functions (:class:`RewardFunction`). Not a plugin: it drives the
core the way the ``grpo-run`` command does. Importing it loads no torch."""

from grpo_run.api.reward_functions import RewardFunction
from grpo_run.api.scoring import score
from grpo_run.api.sweeping import SweepResult, SweepVariant, sweep
from grpo_run.api.training import TrainResult, load_config, train

__all__ = ["RewardFunction", "SweepResult", "SweepVariant", "TrainResult", "load_config", "score", "sweep", "train"]
