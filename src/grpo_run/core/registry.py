"""Typed registries of component classes, filled by the registration hooks."""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from typing import Any

import attrs

from grpo_run.core.components import FAMILIES
from grpo_run.core.errors import PluginError, UnknownComponentError


@attrs.frozen
class ComponentEntry:
    """One registered component class and where it came from."""

    family: str
    name: str
    cls: type
    distribution: str
    version: str


def did_you_mean(word: str, choices: list[str] | tuple[str, ...]) -> str:
    """A ``" (did you mean 'x'?)"`` suffix when a choice is close to ``word``, else ``""``."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


class ComponentRegistry:
    """All registered components, by family and name."""

    def __init__(self) -> None:
        self._entries: dict[str, dict[str, ComponentEntry]] = {family: {} for family in FAMILIES}

    def add(self, family: str, cls: type, distribution: str, version: str) -> None:
        """Add ``cls`` to ``family``; a second component of the same name is a :class:`PluginError`."""
        _check_component_class(family, cls, distribution)
        name = cls.name
        existing = self._entries[family].get(name)
        if existing is not None:
            raise PluginError(
                f"two plugins register a {family} named {name!r}: "
                f"{existing.cls.__module__}.{existing.cls.__qualname__} from distribution "
                f"{existing.distribution!r} and {cls.__module__}.{cls.__qualname__} from distribution "
                f"{distribution!r}; uninstall one of them"
            )
        self._entries[family][name] = ComponentEntry(family, name, cls, distribution, version)

    def get(self, family: str, name: str) -> type:
        """The class registered as ``name`` in ``family``, or :class:`UnknownComponentError`."""
        return self.entry(family, name).cls

    def entry(self, family: str, name: str) -> ComponentEntry:
        try:
            return self._entries[family][name]
        except KeyError:
            names = sorted(self._entries[family])
            raise UnknownComponentError(
                f"no {family} named {name!r}{did_you_mean(name, names)}; "
                f"available: {', '.join(names) or 'none'}"
            ) from None

    def has(self, family: str, name: str) -> bool:
        return name in self._entries[family]

    def names(self, family: str) -> list[str]:
        return sorted(self._entries[family])

    def __iter__(self) -> Iterator[ComponentEntry]:
        for family in FAMILIES:
            yield from (self._entries[family][n] for n in sorted(self._entries[family]))


class Registrar:
    """Handed to a registration hook: ``register(cls)`` adds a component to one family.

    It is bound to the family of the hook and to the distribution of the plugin being called,
    so error messages and ``grpo-run plugins`` can say where each component comes from.
    """

    def __init__(self, registry: ComponentRegistry, family: str, distribution: str, version: str) -> None:
        self._registry = registry
        self.family = family
        self.distribution = distribution
        self.version = version

    def __call__(self, cls: type) -> type:
        self._registry.add(self.family, cls, self.distribution, self.version)
        return cls


def _check_component_class(family: str, cls: Any, distribution: str) -> None:
    where = f"{family} component {getattr(cls, '__qualname__', cls)!r} from distribution {distribution!r}"
    if not isinstance(cls, type):
        raise PluginError(f"{where}: register() takes a class, got {type(cls).__name__}")
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise PluginError(f"{where}: needs a non-empty string class attribute 'name'")
    config_cls = getattr(cls, "Config", None)
    if not (isinstance(config_cls, type) and attrs.has(config_cls)):
        raise PluginError(f"{where}: needs a class attribute 'Config' that is an attrs class")
