"""Typed registries of component classes, filled by the registration hooks.

A component may also be named by import path, ``"my_pkg.losses:MyLoss"``: the registry imports
the module, takes the attribute and checks it against the same contract as a registered class.
No registration is needed, so a loss in a project's own module (or in a package without a
``grpo_run`` entry point) is used exactly like a built-in one. A module that is not installed is
also looked for in :attr:`ComponentRegistry.import_dirs` (the config file's directory) and the
working directory (:mod:`.import_paths`).
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import inspect
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

import attrs

from grpo_run.core.errors import PluginError, UnknownComponentError
from grpo_run.core.plugins.families import FAMILIES, Family, family
from grpo_run.core.plugins.import_paths import import_module_near

T = TypeVar("T")
FamilyRef = Family[T] | str
"""A family, or its key (``"verifier"``)."""


@attrs.frozen
class ComponentEntry(Generic[T]):
    """One registered component class and where it came from."""

    family: Family[T]
    name: str
    cls: type[T]
    distribution: str
    version: str
    source: str = ""
    """The entry point (``name = module``) whose hook registered it, when known."""


def did_you_mean(word: str, choices: list[str] | tuple[str, ...]) -> str:
    """A ``" (did you mean 'x'?)"`` suffix when a choice is close to ``word``, else ``""``."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


class ComponentRegistry:
    """All registered components, by family and name."""

    def __init__(self) -> None:
        self._entries: dict[str, dict[str, ComponentEntry]] = {f.key: {} for f in FAMILIES}
        self._imported: dict[tuple[str, str], ComponentEntry] = {}
        self.import_dirs: list[Path] = []
        """Where a ``module:Class`` name's module is looked for when it is not installed (the
        working directory is searched after these)."""

    def add(self, family_: FamilyRef[T], cls: type[T], distribution: str, version: str, source: str = "") -> None:
        """Add ``cls`` to a family; a second component of the same name is a :class:`PluginError`."""
        fam = family(family_)
        _check_component_class(fam, cls, distribution)
        name = cls.name  # type: ignore[attr-defined]
        existing = self._entries[fam.key].get(name)
        if existing is not None and existing.distribution == distribution:  # nothing to uninstall
            raise PluginError(
                f"distribution {distribution!r} registers a {fam.key} named {name!r} twice: "
                f"{_described(existing.cls, existing.source)} and {_described(cls, source)}; "
                f"give each class its own 'name', or register it once"
            )
        if existing is not None:
            raise PluginError(
                f"two plugins register a {fam.key} named {name!r}: "
                f"{existing.cls.__module__}.{existing.cls.__qualname__} from distribution "
                f"{existing.distribution!r} and {cls.__module__}.{cls.__qualname__} from distribution "
                f"{distribution!r}; uninstall one of them"
            )
        self._entries[fam.key][name] = ComponentEntry(fam, name, cls, distribution, version, source)

    def get(self, family_: FamilyRef[T], name: str) -> type[T]:
        """The class registered as ``name`` in the family, or :class:`UnknownComponentError`."""
        return self.entry(family_, name).cls

    def entry(self, family_: FamilyRef[T], name: str) -> ComponentEntry[T]:
        """The entry of ``name`` in the family; a ``module:Class`` name is imported (see module doc)."""
        fam = family(family_)
        entries = self._entries[fam.key]
        if is_import_path(name) and name not in entries:
            key = (fam.key, name)
            if key not in self._imported:
                self._imported[key] = import_component(fam, name, [*self.import_dirs, Path.cwd()])
            return self._imported[key]
        try:
            return entries[name]
        except KeyError:
            names = sorted(entries)
            raise UnknownComponentError(
                f"no {fam.key} named {name!r}{did_you_mean(name, names)}; "
                f"available: {', '.join(names) or 'none'}"
            ) from None

    def has(self, family_: FamilyRef[Any], name: str) -> bool:
        """Whether ``name`` is registered in the family (import paths are not looked up here)."""
        return name in self._entries[family(family_).key]

    def names(self, family_: FamilyRef[Any]) -> list[str]:
        return sorted(self._entries[family(family_).key])

    def __iter__(self) -> Iterator[ComponentEntry]:
        for fam in FAMILIES:
            yield from (self._entries[fam.key][n] for n in sorted(self._entries[fam.key]))


def _described(cls: type, source: str) -> str:
    where = f" (entry point {source!r})" if source else ""
    return f"{cls.__module__}.{cls.__qualname__}{where}"


class Registrar:
    """Handed to a registration hook: ``register(cls)`` adds a component to one family.

    It is bound to the family of the hook and to the distribution of the plugin being called,
    so error messages and ``grpo-run plugins`` can say where each component comes from.
    """

    def __init__(self, registry: ComponentRegistry, family_: FamilyRef[Any], distribution: str, version: str,
                 source: str = "") -> None:
        self._registry = registry
        self.family: Family[Any] = family(family_)
        self.distribution = distribution
        self.version = version
        self.source = source
        """The entry point (``name = module``) of the plugin being called, when known."""

    def __call__(self, cls: type[T]) -> type[T]:
        self._registry.add(self.family, cls, self.distribution, self.version, self.source)
        return cls


_STAND_INS = {"score": "score_batch", "reset": "run_episode", "step": "run_episode"}
"""A required member another one may replace: a batch verifier needs no per-call ``score``, an
environment that drives its own conversation (``run_episode``) no ``reset``/``step``."""
_ASYNC_ONLY = ("run_episode",)
"""Members that must be ``async def`` where a class defines them."""


def _check_component_class(fam: Family[Any], cls: Any, distribution: str) -> None:
    where = f"{fam.key} component {getattr(cls, '__qualname__', cls)!r} from distribution {distribution!r}"
    if not isinstance(cls, type):
        raise PluginError(f"{where}: register() takes a class, got {type(cls).__name__}")
    problem = component_class_problem(cls, fam)
    if problem is not None:
        raise PluginError(f"{where}: {problem}")


def component_class_problem(cls: Any, fam: Family[Any] | None = None) -> str | None:
    """Why ``cls`` cannot be a component class (of ``fam``, when given), or ``None`` when it can."""
    if not isinstance(cls, type):
        return f"it is {type(cls).__name__} {cls!r}, not a class"
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        return "it needs a non-empty string class attribute 'name'"
    config_cls = getattr(cls, "Config", None)
    if not (isinstance(config_cls, type) and attrs.has(config_cls)):
        return "it needs a class attribute 'Config' that is an attrs class"
    if fam is not None:
        missing = [
            member
            for member in required_methods(fam.protocol)
            if not _defines(cls, member) and not _defines(cls, _STAND_INS.get(member, member))
        ]
        if missing:
            return (
                f"it lacks {', '.join(repr(m) for m in missing)} of the {fam.key} contract "
                f"(grpo_run.{fam.protocol.__name__})"
            )
        for member in _ASYNC_ONLY:
            if _defines(cls, member) and not inspect.iscoroutinefunction(getattr(cls, member)):
                return f"its {member!r} must be an async def"
    return None


def _defines(cls: type, member: str) -> bool:
    """Whether ``cls`` (or a base of its own, not ``object``) defines ``member``; every class has
    a ``__call__`` of ``type``'s, so dunders are looked up in the MRO."""
    if not member.startswith("__"):
        return hasattr(cls, member)
    return any(member in vars(klass) for klass in cls.__mro__ if klass is not object)


def required_methods(protocol: type) -> list[str]:
    """The methods a family protocol requires (``__call__`` included, ``__init__`` not)."""
    return sorted(
        member
        for member, value in vars(protocol).items()
        if callable(value) and (member == "__call__" or not member.startswith("_"))
    )

def is_import_path(name: str) -> bool:
    """``"pkg.module:Class"`` names a component by import path; registered names have no colon."""
    return ":" in name


def import_component(family_: FamilyRef[T], path: str, search_dirs: Sequence[Path] = ()) -> ComponentEntry[T]:
    """Import ``module:attr`` and check it is a valid ``family`` component class.

    Every failure is an :class:`UnknownComponentError` saying what is wrong: a malformed path, a
    module that cannot be found or fails to import, a missing attribute, or an object that is not
    a component class (no ``name``/``Config``). A module that is not installed is looked for in
    ``search_dirs`` too.
    """
    fam = family(family_)
    kind = fam.key
    module_name, _, attr_path = path.partition(":")
    if not module_name or not attr_path or ":" in attr_path:
        raise UnknownComponentError(
            f"{kind} {path!r}: an import path must look like 'package.module:ClassName'"
        )
    try:
        module = import_module_near(module_name, search_dirs)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            looked = ", ".join(str(d) for d in dict.fromkeys(search_dirs))
            raise UnknownComponentError(
                f"{kind} {path!r}: no module named {exc.name!r} (is the package installed in this environment?"
                + (f" not in {looked} either)" if looked else ")")
            ) from None
        raise UnknownComponentError(f"{kind} {path!r}: importing {module_name!r} failed: {exc}") from exc
    except Exception as exc:  # the module's own code failed: say so, with the original error
        raise UnknownComponentError(
            f"{kind} {path!r}: importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    obj: Any = module
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            public = sorted(n for n in dir(module) if not n.startswith("_") and isinstance(getattr(module, n), type))
            raise UnknownComponentError(
                f"{kind} {path!r}: module {module_name!r} has no attribute {attr_path!r}"
                f"{did_you_mean(attr_path, public)}"
            )
        obj = getattr(obj, part)
    problem = component_class_problem(obj, fam)
    if problem is not None:
        raise UnknownComponentError(f"{kind} {path!r} is not a valid {kind} component: {problem}")
    distribution = _distribution_of(module_name)
    version = _version_of(distribution)
    return ComponentEntry(fam, path, obj, distribution, version)


def _distribution_of(module_name: str) -> str:
    top = module_name.split(".")[0]
    dists = importlib.metadata.packages_distributions().get(top)
    return dists[0] if dists else f"<module {top}>"


def _version_of(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return "?"
