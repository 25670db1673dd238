"""Builds the plugin manager and the component registry from installed distributions.

One :class:`PluginHost` per process (or run): it owns the ``pluggy`` manager, the registry filled
by the registration hooks of :data:`~grpo_run.core.plugins.families.FAMILIES`, and the list of
distributions that contributed. Nothing is global; the host is passed to whoever needs it.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Iterable

import attrs
import pluggy

from grpo_run.core.errors import PluginError, PluginInterrupted
from grpo_run.core.plugins import hookspecs
from grpo_run.core.plugins.families import FAMILIES
from grpo_run.core.plugins.registry import ComponentRegistry, Registrar, did_you_mean

ENTRY_POINT_GROUP = "grpo_run"
OWN_DISTRIBUTION = "grpo-run"
DISABLE_AUTOLOAD_ENV = "GRPO_RUN_DISABLE_PLUGIN_AUTOLOAD"
"""When set (non-empty), only grpo-run's own entry points load; third-party ones are skipped."""


@attrs.frozen
class BrokenPlugin:
    """A plugin that could not be loaded or registered (kept by a tolerant host)."""

    entry_point: str
    """``name = value`` of the entry point."""
    distribution: str
    version: str
    error: str


class PluginHost:
    """The plugin manager plus the registry built from it. Create one per process/run."""

    def __init__(
        self,
        pm: pluggy.PluginManager,
        registry: ComponentRegistry,
        distributions: set[tuple[str, str]],
        broken: Iterable[BrokenPlugin] = (),
    ) -> None:
        self.pm = pm
        self.registry = registry
        self._distributions = distributions
        self.broken: list[BrokenPlugin] = list(broken)
        """Plugins skipped because they failed (only when built with ``tolerate_broken``)."""

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


def build_plugin_host(
    *,
    autoload: bool | None = None,
    extra_plugins: Iterable[tuple[object, str]] = (),
    tolerate_broken: bool = False,
) -> PluginHost:
    """Load plugins from the ``grpo_run`` entry points and register their components.

    :param autoload: load third-party entry points; defaults to true unless the environment
        variable ``GRPO_RUN_DISABLE_PLUGIN_AUTOLOAD`` is set. grpo-run's own entry points (the
        built-in plugins) always load.
    :param extra_plugins: ``(plugin_object, distribution_name)`` pairs registered directly
        (tests, embedding).
    :param tolerate_broken: a third-party plugin that fails to import, implements an unknown hook
        or raises while registering is skipped and listed in :attr:`PluginHost.broken` instead of
        raising :class:`PluginError` (``grpo-run plugins`` uses this to show what is broken).

    Every failure names the plugin and its distribution. A hook implementation whose name is not
    a grpo-run hook (``grpo_run_register_verifier`` for ``..._verifiers``) is an error: pluggy
    would otherwise ignore it silently and the plugin would register nothing.
    """
    if autoload is None:
        autoload = not os.environ.get(DISABLE_AUTOLOAD_ENV)
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    dist_of: dict[int, tuple[str, str]] = {}
    entry_point_of: dict[int, str] = {}
    broken: list[BrokenPlugin] = []

    def fail(where: str, dist: tuple[str, str], message: str, cause: BaseException | None = None) -> None:
        if tolerate_broken and _normalise(dist[0]) != _normalise(OWN_DISTRIBUTION):
            broken.append(BrokenPlugin(where, dist[0], dist[1], message))
            return
        hint = f"; to run without third-party plugins set {DISABLE_AUTOLOAD_ENV}=1"
        own = _normalise(dist[0]) == _normalise(OWN_DISTRIBUTION)
        raise PluginError(f"plugin {where} from distribution {dist[0]!r}: {message}{'' if own else hint}") from cause

    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist_id = _distribution_of(ep)
        if not autoload and _normalise(dist_id[0]) != _normalise(OWN_DISTRIBUTION):
            continue
        if pm.get_plugin(_plugin_id(ep)) is not None:
            continue  # the same distribution seen twice on sys.path
        where = f"{ep.name!r} ({ep.value})"
        try:
            plugin = ep.load()
        except KeyboardInterrupt as exc:  # Ctrl-C during a slow import, or the module raised it
            raise _interrupted(f"importing plugin {where}", dist_id) from exc
        except (Exception, SystemExit) as exc:  # a broken third-party package must say who it is
            # SystemExit too: a module that calls sys.exit() at import would end every command silently.
            fail(where, dist_id, f"cannot be imported: {_exception_line(exc)}", exc)
            continue
        problem = _unknown_hooks(pm, plugin)
        if problem:
            fail(where, dist_id, problem)
            continue
        entry_point_of[id(plugin)] = f"{ep.name} = {ep.value}"
        try:
            pm.register(plugin, name=_plugin_id(ep))
        except pluggy.PluginValidationError as exc:  # e.g. a hook with the wrong argument names
            fail(where, dist_id, _one_line(exc), exc)
            continue
        dist_of[id(plugin)] = dist_id
    for plugin, dist_name in extra_plugins:
        problem = _unknown_hooks(pm, plugin)
        if problem:
            fail(repr(getattr(plugin, "__name__", plugin)), (dist_name, "?"), problem)
            continue
        try:
            pm.register(plugin)
        except pluggy.PluginValidationError as exc:
            fail(repr(getattr(plugin, "__name__", plugin)), (dist_name, "?"), _one_line(exc), exc)
            continue
        dist_of[id(plugin)] = (dist_name, "?")
    pm.check_pending()  # every hook implementation now matches a spec (checked above with names)
    registry = ComponentRegistry()
    for fam in FAMILIES:
        caller = getattr(pm.hook, fam.hook)
        # Call each implementation on its own so every class is attributed to its distribution.
        for impl in reversed(caller.get_hookimpls()):
            dist_id = dist_of.get(id(impl.plugin), (impl.plugin_name, "?"))
            source = entry_point_of.get(id(impl.plugin), impl.plugin_name)
            try:
                impl.function(register=Registrar(registry, fam, *dist_id, source=source))
            except PluginError:
                raise  # duplicate names, bad classes: already name the distributions
            except KeyboardInterrupt as exc:
                raise _interrupted(f"registering plugin {impl.plugin_name!r} ({fam.hook})", dist_id) from exc
            except (Exception, SystemExit) as exc:
                fail(repr(impl.plugin_name), dist_id, f"{fam.hook} raised {_exception_line(exc)}", exc)
    return PluginHost(pm, registry, set(dist_of.values()), broken)


def _interrupted(doing: str, dist: tuple[str, str]) -> PluginInterrupted:
    hint = "" if _normalise(dist[0]) == _normalise(OWN_DISTRIBUTION) else (
        f"; if it was no Ctrl-C, the plugin raised KeyboardInterrupt: to run without third-party plugins "
        f"set {DISABLE_AUTOLOAD_ENV}=1")
    return PluginInterrupted(f"while {doing} from distribution {dist[0]!r}{hint}")


def _unknown_hooks(pm: pluggy.PluginManager, plugin: object) -> str | None:
    """A message naming the plugin's ``grpo_run_*`` functions that match no hook, or ``None``."""
    known = {name for name in dir(pm.hook) if name.startswith("grpo_run_")}
    unknown = []
    for attr in dir(plugin):
        if not attr.startswith("grpo_run_") or attr in known:
            continue
        if pm.parse_hookimpl_opts(plugin, attr) is not None or callable(getattr(plugin, attr, None)):
            unknown.append(attr)
    if not unknown:
        return None
    details = "; ".join(f"{name!r} is not a grpo-run hook{did_you_mean(name, sorted(known))}" for name in unknown)
    return f"{details} (hooks: see docs/plugins.md)"


def _distribution_of(ep: importlib.metadata.EntryPoint) -> tuple[str, str]:
    """(name, version) of the distribution declaring ``ep``, with placeholders where its metadata
    cannot be read: a package being uninstalled while this process starts loses its files one by
    one (an entry point may outlive its ``METADATA``), and reporting that must not fail too."""
    try:
        dist = ep.dist
        name, version = (dist.metadata["Name"], dist.version) if dist is not None else (None, None)
    except Exception:  # files gone mid-read, unreadable metadata: report with what is known
        name = version = None
    return (name or "<unknown>", version or "?")


def _plugin_id(ep: importlib.metadata.EntryPoint) -> str:
    return f"{_distribution_of(ep)[0]}:{ep.name}"


def _normalise(name: str) -> str:
    return name.lower().replace("_", "-")


def _exception_line(exc: BaseException) -> str:
    """``Type: message`` on one line; a ``SystemExit`` says that the module exited, and with what."""
    if isinstance(exc, SystemExit):
        return f"SystemExit: it called sys.exit({exc.code!r})"
    return f"{type(exc).__name__}: {_one_line(exc)}"


def _one_line(exc: BaseException) -> str:
    return "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
