"""Builds the plugin manager and the component registry from installed distributions."""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Iterable

import pluggy

from grpo_run.core.plugins import hookspecs
from grpo_run.core.errors import PluginError
from grpo_run.core.plugins.registry import ComponentRegistry, Registrar

ENTRY_POINT_GROUP = "grpo_run"
OWN_DISTRIBUTION = "grpo-run"
DISABLE_AUTOLOAD_ENV = "GRPO_RUN_DISABLE_PLUGIN_AUTOLOAD"
"""When set (non-empty), only grpo-run's own entry points load; third-party ones are skipped."""

# family -> registration hook name
REGISTRATION_HOOKS: dict[str, str] = {
    "verifier": "grpo_run_register_verifiers",
    "loss": "grpo_run_register_losses",
    "kl": "grpo_run_register_kl_estimators",
    "sampler": "grpo_run_register_samplers",
    "engine": "grpo_run_register_engines",
    "task": "grpo_run_register_tasks",
    "model": "grpo_run_register_models",
    "tracker": "grpo_run_register_trackers",
}


class PluginHost:
    """The plugin manager plus the registry built from it. Create one per process/run."""

    def __init__(
        self, pm: pluggy.PluginManager, registry: ComponentRegistry, distributions: set[tuple[str, str]]
    ) -> None:
        self.pm = pm
        self.registry = registry
        self._distributions = distributions

    def distributions(self) -> list[tuple[str, str]]:
        """(name, version) of every distribution that contributed a plugin, sorted."""
        return sorted(self._distributions | {(e.distribution, e.version) for e in self.registry})

    def notify(self, hook_name: str, **kwargs: object) -> list[str]:
        """Call a lifecycle hook on every plugin; a failing plugin is reported, never raised.

        Returns one message per failing implementation (the caller logs and counts them).
        """
        failures = []
        for impl in getattr(self.pm.hook, hook_name).get_hookimpls():
            try:
                impl.function(**{k: kwargs[k] for k in impl.argnames})
            except Exception as exc:  # observers must never take a run down
                failures.append(f"plugin {impl.plugin_name!r} failed in {hook_name}: {type(exc).__name__}: {exc}")
        return failures


def build_plugin_host(*, autoload: bool | None = None, extra_plugins: Iterable[tuple[object, str]] = ()) -> PluginHost:
    """Load plugins from the ``grpo_run`` entry points and register their components.

    :param autoload: load third-party entry points; defaults to true unless the environment
        variable ``GRPO_RUN_DISABLE_PLUGIN_AUTOLOAD`` is set. grpo-run's own entry points (the
        built-in plugins) always load.
    :param extra_plugins: ``(plugin_object, distribution_name)`` pairs registered directly
        (tests, embedding).
    """
    if autoload is None:
        autoload = not os.environ.get(DISABLE_AUTOLOAD_ENV)
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    dist_of: dict[int, tuple[str, str]] = {}
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = ep.dist
        dist_name = dist.metadata["Name"] if dist is not None else "<unknown>"
        if not autoload and _normalise(dist_name) != _normalise(OWN_DISTRIBUTION):
            continue
        if pm.get_plugin(_plugin_id(ep)) is not None:
            continue  # the same distribution seen twice on sys.path
        try:
            plugin = ep.load()
        except Exception as exc:  # a broken third-party package must say who it is
            raise PluginError(
                f"cannot load plugin {ep.name!r} ({ep.value}) from distribution {dist_name!r}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        pm.register(plugin, name=_plugin_id(ep))
        dist_of[id(plugin)] = (dist_name, dist.version if dist is not None else "?")
    for plugin, dist_name in extra_plugins:
        pm.register(plugin)
        dist_of[id(plugin)] = (dist_name, "?")
    registry = ComponentRegistry()
    for family, hook_name in REGISTRATION_HOOKS.items():
        caller = getattr(pm.hook, hook_name)
        # Call each implementation on its own so every class is attributed to its distribution.
        for impl in reversed(caller.get_hookimpls()):
            dist_name, version = dist_of.get(id(impl.plugin), (impl.plugin_name, "?"))
            impl.function(register=Registrar(registry, family, dist_name, version))
    return PluginHost(pm, registry, set(dist_of.values()))


def _plugin_id(ep: importlib.metadata.EntryPoint) -> str:
    dist = ep.dist
    return f"{dist.metadata['Name'] if dist else '?'}:{ep.name}"


def _normalise(name: str) -> str:
    return name.lower().replace("_", "-")
