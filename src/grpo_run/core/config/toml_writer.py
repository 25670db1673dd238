"""TOML text from plain data: strings, numbers, booleans, arrays and tables, which is all a config
holds. A leaf (no config types): the config dump, error paths (:func:`toml_key`), the config
reference and ``grpo-run new-plugin`` write through it.

Hand-written rather than ``tomli-w``: about sixty lines, and a dependency fewer for every install.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


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
