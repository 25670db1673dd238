"""Contract checks for grpo-run plugin authors: one call per component family.

Each ``check_*`` builds the component the way the engine does, drives it through the calls the
engine makes (the real scorer for verifiers, the real aggregation for losses) and raises
:class:`ContractError` -- an :class:`AssertionError`, so pytest reports it as a test failure --
whose message names the component, the check and the offending value. ``grpo_run.testing`` is
also a pytest plugin (entry point ``pytest11``) with fixtures: see
:mod:`grpo_run.testing.pytest_plugin` and ``docs/testing-plugins.md``.

Importing this package does not import torch or transformers; the checks do, when called.
"""

from grpo_run.testing._common import ContractError
from grpo_run.testing.dispatch import check_component
from grpo_run.testing.engines import check_engine
from grpo_run.testing.episodes import check_environment, check_renderer, check_tool
from grpo_run.testing.learner_parts import check_kl_estimator, check_loss, random_loss_inputs
from grpo_run.testing.samplers import check_sampler, sample_rows
from grpo_run.testing.sources import check_model_source, check_task, check_tracker, check_transform
from grpo_run.testing.verifiers import Case, check_verifier

__all__ = [
    "Case",
    "ContractError",
    "check_component",
    "check_engine",
    "check_environment",
    "check_kl_estimator",
    "check_loss",
    "check_model_source",
    "check_renderer",
    "check_sampler",
    "check_task",
    "check_tool",
    "check_tracker",
    "check_transform",
    "check_verifier",
    "random_loss_inputs",
    "sample_rows",
]
