"""Hints for unknown keys: what a key of Open Instruct, ROLL, TRL or verl is called in grpo-run
(:mod:`~grpo_run.core.config.peer_tables`), or where a grpo-run key put in the wrong table belongs.

``learning_rate`` anywhere gets "(grpo-run calls it optim.lr)", ``beta`` in ``[rollout]`` gets
"(it is a key of [kl]: kl.beta)", ``advantage_clip`` gets "(grpo-run has no equivalent: ...)".
A peer table written as it is (ROLL's ``[actor_train.training_args]``) is looked into key by key:
:func:`peer_leaves` lists its keys with their hints.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs

from grpo_run.core.config.peer_tables import lookup
from grpo_run.core.config.schema import KLSlot, PluginSlot, RunConfig


def unknown_key_hint(path: Sequence[str | int]) -> str:
    """`` (grpo-run calls it optim.lr)`` or `` (it is a key of [kl]: kl.beta)`` for the unknown key
    at ``path`` (its whole key path: the tail decides), else ``""``."""
    parts = [p for p in path if isinstance(p, str)]
    if not parts:
        return ""
    entry = lookup(parts)
    if entry is not None and entry.table is None:
        return f" ({entry.hint})"
    homes = _section_keys().get(parts[-1], [])
    if not homes:
        return f" ({entry.hint})" if entry is not None else ""
    tables = " and ".join(f"[{home.rpartition('.')[0]}]" for home in homes)
    return f" (it is a key of {tables}: {', '.join(homes)})"


def is_peer_table(path: Sequence[str | int], value: Any) -> bool:
    """Whether the unknown ``value`` at ``path`` is a peer framework's table to look into."""
    entry = lookup([p for p in path if isinstance(p, str)])
    return isinstance(value, Mapping) and entry is not None and entry.table is not None


def peer_leaves(path: Sequence[str | int], value: Mapping[str, Any]) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """``(key path, hint)`` of every key inside the peer table ``value`` at ``path``: tables that are
    peer tables too (or unknown ones) are looked into, a key with an entry of its own stops there."""
    for name, item in value.items():
        here = (*path, name)
        entry = lookup([p for p in here if isinstance(p, str)])
        if isinstance(item, Mapping) and item and (entry is None or entry.table is not None):
            yield from peer_leaves(here, item)
        else:
            yield here, unknown_key_hint(here)


@functools.cache
def _section_keys() -> dict[str, list[str]]:
    """Every key of every fixed section (nested tables included) -> its dotted paths."""
    index: dict[str, list[str]] = {}

    def add(cls: type, prefix: str) -> None:
        hints = typing.get_type_hints(cls)
        for f in attrs.fields(cls):
            if f.name == "config" and (cls is KLSlot or issubclass(cls, PluginSlot)):
                continue
            index.setdefault(f.name, []).append(f"{prefix}.{f.name}")
            nested = next((t for t in (hints[f.name], *typing.get_args(hints[f.name])) if attrs.has(t)), None)
            if nested is not None and nested is not PluginSlot:
                add(nested, f"{prefix}.{f.name}")

    hints = typing.get_type_hints(RunConfig)
    for f in attrs.fields(RunConfig):
        section = next((t for t in (hints[f.name], *typing.get_args(hints[f.name])) if attrs.has(t)), None)
        if section is not None and section is not PluginSlot:
            add(section, f.name)
    return index


def section_keys() -> dict[str, list[str]]:
    """Every key of every fixed section -> its dotted paths (``"lr" -> ["optim.lr"]``)."""
    return {name: list(paths) for name, paths in _section_keys().items()}
