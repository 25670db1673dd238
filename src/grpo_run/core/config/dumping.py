"""Writing the effective config back out, so a run can be reproduced from its directory.

Plugin slots are written as tables holding ``name`` (and ``beta`` for ``[kl]``) plus every field
of the component's ``Config``, defaults included; ``None`` values are left out (TOML has no null
and every ``None`` in the schema is a default). The text is written by
:mod:`grpo_run.core.config.toml_writer`.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping
from typing import Any

import attrs

from grpo_run.core.config.schema import KLSlot, PluginSlot, RunConfig
from grpo_run.core.config.toml_writer import dumps_toml


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
