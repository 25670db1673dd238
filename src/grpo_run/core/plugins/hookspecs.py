"""The whole extension contract of grpo-run, as ``pluggy`` hook specifications.

Plugins implement these with :data:`grpo_run.hookimpl` and are found through the ``grpo_run``
entry-point group (the built-in plugins too). Registration hooks run once, when the plugin
manager is built; lifecycle hooks let plugins observe a run. The training loop never calls hooks
in its hot path: it calls the registered components as plain objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from grpo_run.core.plugins.registry import Registrar

PROJECT_NAME = "grpo_run"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


# ---------------------------------------------------------------------------------------------
# Registration: called once per plugin when the plugin manager is built.
# Each receives a ``Registrar`` bound to its family and to the calling plugin's distribution;
# ``register(SomeComponentClass)`` adds a class. Return value: ignored.
# ---------------------------------------------------------------------------------------------


@hookspec
def grpo_run_register_verifiers(register: Registrar) -> None:
    """Register verifier classes (contract: :class:`grpo_run.Verifier`).

    :param register: call ``register(cls)`` for each verifier class.

    Called once, when the plugin manager is built, before any config is read.
    """


@hookspec
def grpo_run_register_losses(register: Registrar) -> None:
    """Register policy-loss classes (contract: :class:`grpo_run.Loss`).

    :param register: call ``register(cls)`` for each loss class.

    Called once, when the plugin manager is built, before any config is read.
    """


@hookspec
def grpo_run_register_kl_estimators(register: Registrar) -> None:
    """Register KL-estimator classes (contract: :class:`grpo_run.KLEstimator`).

    :param register: call ``register(cls)`` for each estimator class.

    Called once, when the plugin manager is built, before any config is read.
    """


@hookspec
def grpo_run_register_samplers(register: Registrar) -> None:
    """Register prompt-sampler classes (contract: :class:`grpo_run.Sampler`).

    :param register: call ``register(cls)`` for each sampler class.

    Called once, when the plugin manager is built, before any config is read.
    """


@hookspec
def grpo_run_register_engines(register: Registrar) -> None:
    """Register generation-engine classes (contract: :class:`grpo_run.GenerationEngine`).

    :param register: call ``register(cls)`` for each engine class.

    Called once, when the plugin manager is built, before any config is read.
    """


@hookspec
def grpo_run_register_tasks(register: Registrar) -> None:
    """Register procedural prompt sources (contract: :class:`grpo_run.Task`).

    :param register: call ``register(cls)`` for each task class.

    Called once, when the plugin manager is built, before any config is read.
    """


@hookspec
def grpo_run_register_models(register: Registrar) -> None:
    """Register named local models (contract: :class:`grpo_run.ModelSource`).

    :param register: call ``register(cls)`` for each model source; its ``name`` becomes a value
        accepted by ``model.name_or_path``.

    Called once, when the plugin manager is built, before any config is read.
    """


@hookspec
def grpo_run_register_trackers(register: Registrar) -> None:
    """Register metric trackers (contract: :class:`grpo_run.Tracker`).

    :param register: call ``register(cls)`` for each tracker class.

    Called once, when the plugin manager is built, before any config is read.
    """


@hookspec
def grpo_run_register_transforms(register: Registrar) -> None:
    """Register row transforms (contract: :class:`grpo_run.Transform`).

    :param register: call ``register(cls)`` for each transform class; its ``name`` becomes a value
        accepted by a data source's ``transform``.

    Called once, when the plugin manager is built, before any config is read.
    """


@hookspec
def grpo_run_register_environments(register: Registrar) -> None:
    """Register multi-turn environments (contract: :class:`grpo_run.Environment`).

    :param register: call ``register(cls)`` for each environment class; its ``name`` becomes a
        value accepted by ``[environment] name``.

    Called once, when the plugin manager is built, before any config is read.
    """


@hookspec
def grpo_run_register_renderers(register: Registrar) -> None:
    """Register chat-format renderers for episodes (contract: :class:`grpo_run.Renderer`).

    :param register: call ``register(cls)`` for each renderer class; its ``name`` becomes a value
        accepted by ``[renderer] name``.

    Called once, when the plugin manager is built, before any config is read.
    """


@hookspec
def grpo_run_register_tools(register: Registrar) -> None:
    """Register tools environments may offer (contract: :class:`grpo_run.Tool`).

    :param register: call ``register(cls)`` for each tool class; a ``[tools.<name>]`` table
        enables it.

    Called once, when the plugin manager is built, before any config is read.
    """


# ---------------------------------------------------------------------------------------------
# Lifecycle: observers of a training run. Exceptions raised here are logged and counted;
# they never stop the run. Return values: ignored.
# ---------------------------------------------------------------------------------------------


@hookspec
def grpo_run_run_start(config: Any, run_dir: str) -> None:
    """A run is about to start.

    :param config: the validated :class:`grpo_run.RunConfig`.
    :param run_dir: the run directory (config and metrics are written there).

    Called once, after the model is loaded and before the first rollout.
    """


@hookspec
def grpo_run_step_end(step: int, metrics: Mapping[str, float]) -> None:
    """A learner step has finished.

    :param step: the step number (1-based).
    :param metrics: every metric logged for this step, eval metrics included.

    Called after each update, after the metrics were written to ``metrics.jsonl``.
    """


@hookspec
def grpo_run_run_end(run_dir: str, status: str, error: BaseException | None) -> None:
    """A run has ended.

    :param run_dir: the run directory.
    :param status: ``"completed"``, ``"failed"`` or ``"interrupted"``.
    :param error: the exception that ended the run, when ``status`` is not ``"completed"``.

    Called once, after the final checkpoint was written (or the run failed).
    """
