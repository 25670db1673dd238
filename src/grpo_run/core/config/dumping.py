"""Writing the effective config back out, so a run can be reproduced from its directory.

Plugin slots are written as tables holding ``name`` (and ``beta`` for ``[kl]``) plus every field
of the component's ``Config``, defaults included; ``None`` values are left out (TOML has no null
and every ``None`` in the schema is a default). A tiny TOML writer suffices: values are strings,
numbers, booleans, arrays and tables.
"""

from __future__ import annotations

import enum
import math
import os
import re
from collections.abc import Mapping
from typing import Any

import attrs

from grpo_run.core.config.schema import KLSlot, PluginSlot, RunConfig

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def config_to_dict(cfg: RunConfig) -> dict[str, Any]:
    """The config as plain TOML-ready data; ``parse_config`` of it gives back an equal config."""
    return _to_plain(cfg)


def dump_config_toml(cfg: RunConfig) -> str:
    """The config as TOML text; ``parse_config(tomllib.loads(text), registry) == cfg``."""
    return dumps_toml(config_to_dict(cfg))


def _to_plain(value: Any) -> Any:
    if isinstance(value, (PluginSlot, KLSlot)):
        core = {f.name: _to_plain(getattr(value, f.name)) for f in attrs.fields(type(value))
                if f.name != "config" and getattr(value, f.name) is not None}  # None: the default, not TOML
        config = _to_plain(value.config) if value.config is not None else {}
        return {**core, **config}
    if attrs.has(type(value)):
        fields = (f for f in attrs.fields(type(value)) if f.init)
        return {f.name: _to_plain(getattr(value, f.name)) for f in fields if getattr(value, f.name) is not None}
    if isinstance(value, Mapping):
        return {str(k): _to_plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_to_plain(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return value


def dumps_toml(table: Mapping[str, Any]) -> str:
    """TOML text for ``table`` (str/int/float/bool values, arrays and nested tables)."""
    lines: list[str] = []
    _write_table(lines, (), table)
    return "\n".join(lines) + "\n"


def _write_table(lines: list[str], prefix: tuple[str, ...], table: Mapping[str, Any]) -> None:
    scalars = {k: v for k, v in table.items() if not isinstance(v, Mapping)}
    tables = {k: v for k, v in table.items() if isinstance(v, Mapping)}
    # A table holding only sub-tables needs no header; an empty one does, so that it exists.
    if prefix and (scalars or not tables):
        if lines:
            lines.append("")
        lines.append("[" + ".".join(toml_key(p) for p in prefix) + "]")
    lines.extend(f"{toml_key(k)} = {_value(v)}" for k, v in scalars.items())
    for k, v in tables.items():
        _write_table(lines, (*prefix, k), v)


def toml_key(key: str) -> str:
    """``key`` as written in TOML: bare when allowed, else a quoted string."""
    return key if _BARE_KEY.match(key) else _string(key)


def toml_value(value: Any) -> str:
    """``value`` written as a TOML value (``"text"``, ``3``, ``true``, ``[1, 2]``)."""
    return _value(value)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return repr(value)  # shortest round-tripping form; inf/-inf are TOML too
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{toml_key(k)} = {_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {type(value).__name__} {value!r} as TOML")


def _string(text: str) -> str:
    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'
