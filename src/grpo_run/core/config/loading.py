"""Loading a config: read TOML, apply ``--set`` overrides, structure, check invariants."""

from __future__ import annotations

import copy
import datetime
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cattrs.errors import ClassValidationError

from grpo_run.core.config.converter import make_converter
from grpo_run.core.config.formatting import describe_value, issues_from_exception, join_path
from grpo_run.core.config.invariants import check_invariants
from grpo_run.core.config.lora_sync import lora_sync_issues
from grpo_run.core.config.run_defaults import apply_run_defaults
from grpo_run.core.config.schema import RunConfig
from grpo_run.core.errors import ConfigError, ConfigIssue
from grpo_run.core.plugins.registry import ComponentRegistry

OVERRIDE_SOURCE = "--set"
_TOML_POSITION = re.compile(r"^(?P<what>.*) \(at line (?P<line>\d+), column (?P<col>\d+)\)$", re.S)


def load_config(path: str | os.PathLike[str], registry: ComponentRegistry, overrides: Sequence[str] = (),
                set_aside: list[ConfigIssue] | None = None) -> RunConfig:
    """Read the TOML file at ``path``, apply ``overrides`` (``a.b.c=value``) and structure it.

    Raises :class:`ConfigError` listing every problem: a missing or unreadable file, a TOML syntax
    error (with line and column), malformed overrides, unknown keys, wrong types, failed
    validators and broken invariants. Issues caused by an override say so. With ``set_aside``,
    issues about this machine rather than the config (a package not installed here) go there
    instead (``grpo-run plan`` plans for another machine).
    """
    source = os.fspath(path)
    data = read_toml(Path(path), source)
    config_dir = Path(path).resolve().parent
    if config_dir not in registry.import_dirs:  # a `module:Class` name may live next to the config
        registry.import_dirs.append(config_dir)
    data = apply_overrides(data, overrides)
    try:
        return parse_config(data, registry, source, set_aside=set_aside)
    except ConfigError as err:
        raise ConfigError(source, [_blame_override(issue, overrides) for issue in err.issues]) from err


def parse_config(data: Mapping[str, Any], registry: ComponentRegistry, source: str = "<config>",
                 set_aside: list[ConfigIssue] | None = None) -> RunConfig:
    """Structure already-parsed TOML data into a :class:`RunConfig` and check its invariants.

    ``source`` names the data in error messages (usually the file name).
    """
    converter = make_converter(registry)
    try:
        cfg = converter.structure(data, RunConfig)
    except (ClassValidationError, ValueError, TypeError) as exc:
        found = issues_from_exception(exc)
        raise ConfigError(source, found + _invariants_without(data, found, converter)) from exc
    cfg, issues = apply_run_defaults(cfg)
    issues += check_invariants(cfg)
    issues += lora_sync_issues(cfg, registry)
    if set_aside is not None:
        set_aside += [issue for issue in issues if issue.about_machine]
        issues = [issue for issue in issues if not issue.about_machine]
    if issues:
        raise ConfigError(source, issues)
    return cfg


_PATH_PART = re.compile(r'"((?:[^"\\]|\\.)*)"|([A-Za-z0-9_-]+)|\[(\d+)\]')


def _invariants_without(data: Mapping[str, Any], found: Sequence[ConfigIssue], converter: Any) -> list[ConfigIssue]:
    """The invariant issues of ``data`` with the keys of ``found`` taken out (they fall back to
    their defaults), so that every error is reported at once. An invariant that names a removed
    key is left out (its default says nothing about the user's value); ``[]`` when the rest
    still does not structure."""
    removed: list[str] = []
    trimmed = copy.deepcopy(dict(data))
    for _ in range(3):  # taking a key out may leave a required one missing: a few rounds
        paths = [issue.path for issue in found]
        if not paths or "" in paths or not all(_remove_key(trimmed, path) for path in paths):
            return []
        removed += paths
        try:
            cfg = converter.structure(trimmed, RunConfig)
        except (ClassValidationError, ValueError, TypeError) as exc:
            found = issues_from_exception(exc)
            continue
        return [issue for issue in check_invariants(cfg)
                if not any(issue.path.startswith(p) or p.startswith(issue.path + ".") or p in issue.message
                           for p in removed)]
    return []


def _remove_key(data: dict[str, Any], path: str) -> bool:
    """Delete the value at a key path (``a.b[0].c``) from ``data``; False when it is not there."""
    parts: list[str | int] = [m[1] or m[2] if m[3] is None else int(m[3]) for m in _PATH_PART.finditer(path)]
    node: Any = data
    for part in parts[:-1]:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return False
    last = parts[-1] if parts else None
    if isinstance(node, dict) and last in node:
        del node[last]
        return True
    if isinstance(node, list) and isinstance(last, int) and last < len(node):
        del node[last]
        return True
    return False


def read_toml(path: Path, source: str | None = None) -> dict[str, Any]:
    """Parse the TOML file at ``path``; any failure is a :class:`ConfigError` naming the file."""
    source = source if source is not None else os.fspath(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(source, [ConfigIssue("", "no such file")]) from None
    except IsADirectoryError:
        raise ConfigError(source, [ConfigIssue("", "is a directory, not a TOML file")]) from None
    except OSError as exc:
        raise ConfigError(source, [ConfigIssue("", f"cannot read: {exc.strerror or exc}")]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(source, [ConfigIssue("", f"not UTF-8 text (byte {exc.start})")]) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(source, [ConfigIssue("", _describe_toml_error(exc))]) from None


def _describe_toml_error(exc: tomllib.TOMLDecodeError) -> str:
    match = _TOML_POSITION.match(str(exc))
    if match is None:
        return f"invalid TOML: {exc}"
    return f"invalid TOML at line {match['line']}, column {match['col']}: {match['what']}"


# ---------------------------------------------------------------------------------------------
# --set overrides
# ---------------------------------------------------------------------------------------------


def apply_overrides(
    data: Mapping[str, Any], overrides: Sequence[str], source: str = OVERRIDE_SOURCE
) -> dict[str, Any]:
    """A copy of ``data`` with each ``a.b.c=value`` override applied in order.

    The value is read as a TOML value (``3e-4``, ``true``, ``["\\n"]``, ``"quoted"``) and, when it
    is not one, taken as a plain string (``name=dapo``). Missing tables on the way are created,
    so an override can enable a plugin (``verifiers.math.weight=2``). Malformed overrides are
    reported together as a :class:`ConfigError` from ``source``.
    """
    result = copy.deepcopy(dict(data))
    issues: list[ConfigIssue] = []
    for override in overrides:
        key, sep, raw = override.partition("=")
        parts = [part.strip() for part in key.split(".")]
        if not sep or not all(parts):
            issues.append(
                ConfigIssue("", f"malformed override {override!r}: expected KEY=VALUE, e.g. rollout.temperature=0.7")
            )
            continue
        node = result
        for depth, part in enumerate(parts[:-1], start=1):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                where = join_path(parts[:depth])
                issues.append(
                    ConfigIssue("", f"cannot apply {override!r}: {where} is {describe_value(child)}, not a table")
                )
                break
            node = child
        else:
            node[parts[-1]] = parse_override_value(raw)
    if issues:
        raise ConfigError(source, issues)
    return result


def parse_override_value(raw: str) -> Any:
    """``"3e-4"`` -> ``0.0003``, ``"[1, 2]"`` -> ``[1, 2]``, ``"dapo"`` -> ``"dapo"`` (not TOML)."""
    text = raw.strip()
    try:
        parsed = tomllib.loads(f"value = {text}")
    except tomllib.TOMLDecodeError:
        return text
    value = parsed.get("value")
    # Dates and times are not config values; "2024-01-01" is meant as a string (e.g. a run name).
    if set(parsed) != {"value"} or isinstance(value, (datetime.date, datetime.time)):
        return text
    return value


def _blame_override(issue: ConfigIssue, overrides: Sequence[str]) -> ConfigIssue:
    """Point at the last override that set the issue's key (or a key under or above it)."""
    for override in reversed(overrides):
        key = join_path([part.strip() for part in override.partition("=")[0].split(".")])
        if issue.path and (
            issue.path == key or issue.path.startswith((key + ".", key + "[")) or key.startswith(issue.path + ".")
        ):
            return ConfigIssue(issue.path, f"{issue.message} (from --set {override})")
    return issue
