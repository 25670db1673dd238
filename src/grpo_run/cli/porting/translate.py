"""From a peer's settings to grpo-run's: the peer tables move each value, a framework's own rules
(:mod:`~grpo_run.cli.porting.frameworks`) handle what needs arithmetic or several settings at once,
and what cannot move is listed with the reason.

The result is a :class:`Translation`: grpo-run key paths with values and where each came from,
the data sources, what has no equivalent, what to do by hand, and the parity notes. :func:`settle`
then structures it as a config and leaves out whatever would not check, saying why.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from grpo_run.cli.porting.sources import LABELS, PeerConfig
from grpo_run.core.config.loading import parse_config
from grpo_run.core.config.peer_names import section_keys
from grpo_run.core.config.peer_tables import OMIT, NoEquivalentValue, lookup
from grpo_run.core.config.toml_writer import toml_value
from grpo_run.core.errors import ConfigError
from grpo_run.core.plugins.registry import ComponentRegistry

_AMBIGUOUS_HOMES = {"temperature": "rollout.temperature", "seed": "run.seed"}
"""grpo-run keys in two tables: the one a peer's key of that name means."""


@attrs.define
class Setting:
    value: Any
    origin: str
    """Where it came from, for the config's comment (``--learning_rate 5e-7``, ``Open Instruct's default``)."""


@attrs.define
class Translation:
    peer: PeerConfig
    settings: dict[str, Setting] = attrs.Factory(dict)
    """grpo-run key path -> value (``data.train.*`` and ``data.eval.*`` excepted: :attr:`sources`)."""
    sources: dict[str, list[dict[str, Setting]]] = attrs.Factory(lambda: {"train": [], "eval": []})
    every_source: dict[str, dict[str, Setting]] = attrs.Factory(lambda: {"train": {}, "eval": {}})
    """``data.train.split = "test"``: a field of every source of that set."""
    left_out: list[tuple[str, str]] = attrs.Factory(list)
    """(the peer's setting as written, why grpo-run has no equivalent)."""
    by_hand: list[tuple[str, str]] = attrs.Factory(list)
    """(the peer's setting, what to do)."""
    parity: list[str] = attrs.Factory(list)
    """Settings a porter would not guess, one line each."""
    later: dict[str, Setting] = attrs.Factory(dict)
    """Peer settings a framework's rules keep for the end (they need others: a ratio of the steps)."""

    @property
    def label(self) -> str:
        return LABELS[self.peer.framework]

    @property
    def values(self) -> dict[str, Any]:
        """The peer's settings by the last part of their key path (``learning_rate``)."""
        return {path.rpartition(".")[2]: value for path, value in self.peer.settings}

    def written(self, path: str, value: Any) -> str:
        """A peer setting as the user wrote it: ``--learning_rate 5e-07`` or ``a.b: 1``."""
        if self.peer.style == "argv":
            shown = " ".join(map(str, value)) if isinstance(value, list) else "" if value is True else str(value)
            return f"--{path} {shown}".rstrip()
        if self.peer.style == "kwargs":
            return f"{path}={value!r}"
        return f"{path}: {value}"

    def set(self, path: str, value: Any, origin: str, *, keep: bool = False) -> None:
        """Set the grpo-run key ``path`` (``keep``: unless something set it already)."""
        head, _, field = path.rpartition(".")
        if head in ("data.train", "data.eval"):
            target = self.every_source[head.rpartition(".")[2]]
        else:
            target, field = self.settings, path
        if keep and field in target:
            return
        replaced = target.get(field)
        if replaced is not None and replaced.origin != origin:
            if replaced.value == value:  # two of the source's settings say the same
                origin = f"{replaced.origin}; {origin}"
            else:
                self.by_hand.append((replaced.origin, f"{path} is {toml_value(value)} from {origin} instead: check "
                                                      "which the source meant"))
        target[field] = Setting(value, origin)

    def has(self, path: str) -> bool:
        return path in self.settings

    def get(self, path: str, default: Any = None) -> Any:
        setting = self.settings.get(path)
        return default if setting is None else setting.value

    def add_source(self, which: str, fields: Mapping[str, Any], origin: str) -> None:
        self.sources[which].append({name: Setting(value, origin) for name, value in fields.items()})


Handler = Callable[[Translation, str, Any], bool]
"""A framework's rule for one setting: returns True when it took the setting."""


def translate(peer: PeerConfig, handlers: Mapping[str, Handler], finish: Callable[[Translation], None]) -> Translation:
    """Every setting of ``peer`` through ``handlers`` (by the last part of its key path, or the
    whole path) and else the peer tables; then ``finish`` (what needs all settings at once)."""
    t = Translation(peer)
    for path, value in peer.settings:
        parts = path.split(".")
        handler = next((handlers[".".join(parts[i:])] for i in range(len(parts)) if ".".join(parts[i:]) in handlers),
                       None)
        if handler is not None and handler(t, path, value):
            continue
        move(t, path, value)
    finish(t)
    return t


def move(t: Translation, path: str, value: Any) -> None:
    """Move one setting by the peer tables (or, for a name grpo-run shares, its own key)."""
    written = t.written(path, value)
    entry = lookup(path.split("."))
    if entry is None:
        leaf = path.rpartition(".")[2]
        homes = section_keys().get(leaf, [])
        home = homes[0] if len(homes) == 1 else _AMBIGUOUS_HOMES.get(leaf)
        if home is None:
            t.left_out.append((written, f"not a setting grpo-run knows from {t.label}"))
        else:
            t.set(home, value, written)
        return
    if entry.none is not None:
        t.left_out.append((written, entry.none))
        return
    if entry.to is None:
        t.by_hand.append((written, entry.hint))
        return
    try:
        converted = entry.convert(value) if entry.convert is not None else value
    except (NoEquivalentValue, ValueError, TypeError) as exc:
        t.left_out.append((written, str(exc)))
        return
    if converted is OMIT:
        return
    t.set(entry.to, converted, written)
    for other, also in entry.also.items():
        t.set(other, also, f"goes with {written}", keep=True)


# -- to a config that checks ------------------------------------------------------------------------


def config_data(t: Translation) -> dict[str, Any]:
    """The translation as config data (what the TOML file will hold)."""
    data: dict[str, Any] = {}
    for path, setting in t.settings.items():
        node = data
        *heads, last = path.split(".")
        for head in heads:
            node = node.setdefault(head, {})
        if isinstance(setting.value, Mapping) and isinstance(node.get(last), dict):
            node[last].update(copy.deepcopy(dict(setting.value)))
        elif isinstance(node.get(last), dict) and setting.value == {}:
            pass
        else:
            node[last] = copy.deepcopy(setting.value)
    for which in ("train", "eval"):
        rows = [{**{k: s.value for k, s in t.every_source[which].items()}, **{k: s.value for k, s in source.items()}}
                for source in t.sources[which]]
        if rows:
            data.setdefault("data", {})[which] = rows
    return data


def settle(t: Translation, registry: ComponentRegistry, rounds: int = 8) -> list[str]:
    """Leave out the settings grpo-run refuses (each listed with the refusal); the problems that
    remain (not one setting's: a missing verifier, no data; or this machine's: a package a setting
    needs is not installed here, so the setting stays) are returned."""
    for _ in range(rounds):
        try:
            parse_config(config_data(t), registry, "<import>")
            return []
        except ConfigError as err:
            issues = err.issues
        dropped = False
        for issue in issues:
            if issue.about_machine:  # right for the config, missing here: kept, to fix on this machine
                continue
            owner = _owner(t, issue.path)
            if owner is not None:
                setting = owner[0].pop(owner[1])
                t.left_out.append((f"{issue.path} = {toml_value(setting.value)} (from {setting.origin})",
                                   f"grpo-run refuses it: {issue.message}"))
                dropped = True
        if not dropped:
            return [f"{issue.path}: {issue.message}" if issue.path else issue.message for issue in issues]
    return ["the imported settings did not settle; check the result with grpo-run check"]


def _owner(t: Translation, path: str) -> tuple[dict[str, Setting], str] | None:
    """The setting an issue at ``path`` is about: the longest set key path it starts with."""
    if path.startswith(("data.train[", "data.eval[")):
        which = "train" if path.startswith("data.train") else "eval"
        index_end = path.index("]")
        field = path[index_end + 2:].split(".")[0]
        index = int(path[len(f"data.{which}["):index_end])
        sources = t.sources[which]
        if index < len(sources) and field in sources[index]:
            return sources[index], field
        if field in t.every_source[which]:
            return t.every_source[which], field
        return None
    parts = path.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in t.settings:
            return t.settings, candidate
    return None
