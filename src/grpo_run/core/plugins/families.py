"""The one table of component families.

Every place that needs to know the families -- the plugin host (which hook fills which family),
the registry (typed lookups), the config converter (which ``RunConfig`` field selects components
of which family), ``grpo-run plugins`` and the docs meta-tests -- reads :data:`FAMILIES`. Adding a
family is one row here, one hookspec and one protocol.
"""

from __future__ import annotations

from typing import Generic, TypeVar

import attrs

from grpo_run.core.plugins.contracts import (
    Environment,
    GenerationEngine,
    KLEstimator,
    Loss,
    ModelSource,
    Renderer,
    Sampler,
    Task,
    Tool,
    Tracker,
    Transform,
    Verifier,
)

T = TypeVar("T")


@attrs.frozen
class Family(Generic[T]):
    """One kind of component."""

    key: str
    """Singular name used in messages and ``grpo-run plugins`` (``"verifier"``)."""
    protocol: type[T]
    """The contract a registered class satisfies (:mod:`~grpo_run.core.plugins.contracts`)."""
    hook: str
    """The registration hook that fills this family (``grpo_run_register_verifiers``)."""
    slot: str | None
    """The ``RunConfig`` field that selects components of this family (``None``: selected otherwise,
    e.g. models by ``model.name_or_path``)."""
    many: bool = False
    """The slot is a table of ``<name> = {config}`` enabling several components (verifiers,
    trackers), instead of one chosen component with a ``name`` key."""

    def __str__(self) -> str:
        return self.key


VERIFIER = Family[Verifier]("verifier", Verifier, "grpo_run_register_verifiers", "verifiers", many=True)
LOSS = Family[Loss]("loss", Loss, "grpo_run_register_losses", "loss")
KL = Family[KLEstimator]("kl", KLEstimator, "grpo_run_register_kl_estimators", "kl")
SAMPLER = Family[Sampler]("sampler", Sampler, "grpo_run_register_samplers", "sampler")
ENGINE = Family[GenerationEngine]("engine", GenerationEngine, "grpo_run_register_engines", "engine")
TASK = Family[Task]("task", Task, "grpo_run_register_tasks", "task")
MODEL = Family[ModelSource]("model", ModelSource, "grpo_run_register_models", None)
TRACKER = Family[Tracker]("tracker", Tracker, "grpo_run_register_trackers", "trackers", many=True)
TRANSFORM = Family[Transform]("transform", Transform, "grpo_run_register_transforms", None)
"""Row transforms are chosen per data source (``[[data.train]] transform = ...``), not by a slot."""

ENVIRONMENT = Family[Environment]("environment", Environment, "grpo_run_register_environments", "environment")
RENDERER = Family[Renderer]("renderer", Renderer, "grpo_run_register_renderers", "renderer")
TOOL = Family[Tool]("tool", Tool, "grpo_run_register_tools", "tools", many=True)

FAMILIES: tuple[Family, ...] = (
    VERIFIER, LOSS, KL, SAMPLER, ENGINE, TASK, MODEL, TRACKER, TRANSFORM, ENVIRONMENT, RENDERER, TOOL,
)
"""Every family the engine knows, in the order ``grpo-run plugins`` lists them."""

_BY_KEY = {family.key: family for family in FAMILIES}
_BY_SLOT = {family.slot: family for family in FAMILIES if family.slot is not None}


def family(key: str | Family[T]) -> Family[T]:
    """The family named ``key`` (``"verifier"``); a :class:`Family` is returned as is."""
    if isinstance(key, Family):
        return key
    try:
        return _BY_KEY[key]
    except KeyError:
        raise KeyError(f"no component family {key!r}; families: {', '.join(_BY_KEY)}") from None


def family_of_slot(slot: str) -> Family | None:
    """The family selected by the ``RunConfig`` field ``slot``, or ``None`` for a fixed section."""
    return _BY_SLOT.get(slot)
