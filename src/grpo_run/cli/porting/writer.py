"""The imported config as commented TOML: a header with what has no equivalent, what to do by
hand and the parity settings, then each table in grpo-run's order, each key with where it came
from."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping

import attrs

from grpo_run.cli.porting.translate import Setting, Translation
from grpo_run.core.config.schema import RunConfig
from grpo_run.core.config.toml_writer import toml_key, toml_value

_ORDER = [f.name for f in attrs.fields(RunConfig)]


def render(t: Translation, problems: list[str]) -> str:
    lines = [f"# Imported by `grpo-run import` from {t.peer.source} ({t.label}).",
             "# Each key's comment says where it came from. Then: grpo-run check <this file>"]
    _section(lines, "Parity: settings that make grpo-run do what the source did", t.parity)
    _section(lines, "No equivalent in grpo-run (left out)", [f"{what}: {why}" for what, why in t.left_out])
    _section(lines, "To do by hand", [f"{what}: {todo}" for what, todo in t.by_hand])
    _section(lines, "Before it runs, fix", problems)
    for table, keys in _tables(t):
        origins = {setting.origin for _, setting in keys}
        shared = origins.pop() if len(origins) == 1 and len(keys) > 1 else None
        header = f"[{table}]" if not table.startswith("[[") else table
        lines += ["", header + (f"  # {shared}" if shared else "")]
        for key, setting in keys:
            if key is None:  # the table itself, enabled with its defaults
                lines[-1] += "" if shared else f"  # {setting.origin}"
                continue
            comment = "" if shared else f"  # {setting.origin}"
            lines.append(f"{toml_key(key)} = {toml_value(setting.value)}{comment}")
    return "\n".join(lines) + "\n"


def _section(lines: list[str], title: str, items: list[str]) -> None:
    if not items:
        return
    lines += ["#", f"# {title}:"]
    for item in items:
        wrapped = textwrap.wrap(item, 110, initial_indent="#   ", subsequent_indent="#     ", break_on_hyphens=False)
        lines += wrapped or ["#"]


def _tables(t: Translation) -> list[tuple[str, list[tuple[str | None, Setting]]]]:
    """(table header, its keys) in grpo-run's section order; a ``None`` key is the table itself."""
    tables: dict[str, list[tuple[str | None, Setting]]] = {}
    for path, setting in t.settings.items():
        if isinstance(setting.value, Mapping):
            keys = tables.setdefault(path, [])
            if not setting.value:
                keys.insert(0, (None, setting))
            keys.extend((key, Setting(value, setting.origin)) for key, value in setting.value.items())
            continue
        head, _, key = path.rpartition(".")
        tables.setdefault(head, []).append((key, setting))
    out: list[tuple[str, list[tuple[str | None, Setting]]]] = list(tables.items())
    for which in ("train", "eval"):
        for source in t.sources[which]:
            shared = {k: s for k, s in t.every_source[which].items() if k not in source}
            out.append((f"[[data.{which}]]", list({**source, **shared}.items())))
    return sorted(out, key=lambda item: _rank(item[0].strip("[]")))


def _rank(table: str) -> tuple[int, int, str]:
    section = table.split(".")[0]
    within = ("data", "data.train", "data.eval").index(table) if table in ("data", "data.train", "data.eval") else 0
    return (_ORDER.index(section) if section in _ORDER else len(_ORDER), within, table)
