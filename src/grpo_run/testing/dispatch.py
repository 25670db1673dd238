"""``check_component``: run the check of whatever family a registered class belongs to."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from grpo_run.testing._common import component_name
from grpo_run.testing.engines import check_engine
from grpo_run.testing.episodes import check_environment, check_renderer, check_tool
from grpo_run.testing.learner_parts import check_kl_estimator, check_loss
from grpo_run.testing.samplers import check_sampler
from grpo_run.testing.sources import check_model_source, check_task, check_tracker, check_transform
from grpo_run.testing.verifiers import check_verifier

if TYPE_CHECKING:
    from grpo_run.core.plugins.registry import ComponentRegistry

CHECKS: dict[str, Callable[..., None]] = {
    "verifier": check_verifier,
    "loss": check_loss,
    "kl": check_kl_estimator,
    "sampler": check_sampler,
    "engine": check_engine,
    "task": check_task,
    "model": check_model_source,
    "tracker": check_tracker,
    "transform": check_transform,
    "environment": check_environment,
    "renderer": check_renderer,
    "tool": check_tool,
}
"""The check of each component family (keys of :data:`grpo_run.core.plugins.families.FAMILIES`)."""


def check_component(cls: type, *args: Any, registry: ComponentRegistry | None = None, family: str | None = None,
                    **kwargs: Any) -> None:
    """Run the check of ``cls``'s family with ``args`` and ``kwargs`` (see each ``check_*``).

    The family is ``family`` when given, else the one ``cls`` is registered in: in ``registry``,
    or in a plugin host built from the installed entry points (so a class must be registered
    by its distribution's ``grpo_run`` entry point, which this also checks).
    """
    if family is None:
        if registry is None:
            from grpo_run.core.plugins.host import build_plugin_host

            registry = build_plugin_host().registry
        families = sorted({entry.family.key for entry in registry if entry.cls is cls})
        if len(families) != 1:
            found = f"in the families {', '.join(families)}" if families else "in no family"
            raise AssertionError(f"component {component_name(cls)!r}: registry: the class is registered {found}; "
                                 f"pass family= (one of {', '.join(CHECKS)})")
        family = families[0]
    if family not in CHECKS:
        raise ValueError(f"no component family {family!r}; families: {', '.join(CHECKS)}")
    CHECKS[family](cls, *args, **kwargs)
