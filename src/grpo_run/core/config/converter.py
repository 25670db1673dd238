"""The config converter: strict ``cattrs`` hooks plus the plugin slots of :class:`RunConfig`.

A plugin slot's table is split in two: the core keys of the slot class (``name``; for ``[kl]``
also ``beta``) and the rest, which is structured into the ``Config`` class of the component the
registry holds under that name. Errors of both halves sit directly under the slot's key
(``loss.name``, ``loss.clip_higher``).
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any

import attrs
import cattrs
from cattrs.errors import ClassValidationError

from grpo_run.core.config.data_sections import TransformSlot
from grpo_run.core.config.formatting import UnknownKeyError, describe_value, unknown_key_error, with_key
from grpo_run.core.config.hooks import register_strict_hooks, structure_attrs
from grpo_run.core.config.schema import RunConfig
from grpo_run.core.config.slots import KLSlot, PluginSlot
from grpo_run.core.errors import UnknownComponentError
from grpo_run.core.plugins.families import TRANSFORM, Family, family_of_slot
from grpo_run.core.plugins.registry import ComponentRegistry


def make_converter(registry: ComponentRegistry) -> cattrs.Converter:
    """A new strict converter; ``converter.structure(data, RunConfig)`` structures a whole config.

    ``registry`` resolves the plugin slots (``[loss]``, ``[verifiers.<name>]``, ...) to the
    chosen component's ``Config`` class. Errors are ``cattrs`` validation groups; see
    :func:`grpo_run.core.config.formatting.issues_from_exception`.
    """
    converter = cattrs.Converter(detailed_validation=True, forbid_extra_keys=True)
    register_strict_hooks(converter)
    converter.register_structure_hook(RunConfig, lambda data, _cls: structure_run_config(converter, registry, data))
    converter.register_structure_hook(TransformSlot, lambda data, _cls: structure_transform(converter, registry, data))
    return converter


def structure_transform(converter: cattrs.Converter, registry: ComponentRegistry, data: Any) -> TransformSlot:
    """A data source's ``transform``: a name (``"gsm8k"``) or a table with ``name`` and options."""
    table = {"name": data} if isinstance(data, str) else data
    return _structure_slot(converter, registry, TRANSFORM, TransformSlot, table, None)  # type: ignore[return-value]


def structure_run_config(converter: cattrs.Converter, registry: ComponentRegistry, data: Any) -> RunConfig:
    """Structure a whole config table, collecting the errors of every section."""
    if not isinstance(data, Mapping):
        raise TypeError(f"expected a table, got {describe_value(data)}")
    fields = attrs.fields(RunConfig)
    hints = typing.get_type_hints(RunConfig)
    known = [f.name for f in fields]
    errors: list[Exception] = [unknown_key_error(key, known, data[key]) for key in data if key not in known]
    values: dict[str, Any] = {}
    for f in fields:
        fam = family_of_slot(f.name)
        try:
            if fam is not None and not fam.many:
                default_name = _default_slot_name(f)
                if f.name in data or default_name is not None:
                    values[f.name] = _structure_slot(
                        converter, registry, fam, hints[f.name], data.get(f.name, {}), default_name
                    )
            elif fam is not None:
                if f.name in data:
                    values[f.name] = structure_components(converter, registry, fam, data[f.name])
            elif f.name in data:
                values[f.name] = converter.structure(data[f.name], hints[f.name])
        except (ClassValidationError, ValueError, TypeError) as exc:  # every section's errors, with its key
            errors.append(with_key(exc, f.name))
    if errors:
        raise ClassValidationError("while structuring RunConfig", errors, RunConfig)
    return RunConfig(**values)


def _default_slot_name(f: attrs.Attribute) -> str | None:
    """The component name a slot defaults to in the schema (``None`` for an optional slot)."""
    default = f.default
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
        default = default.factory()
    return getattr(default, "name", None)


def _structure_slot(
    converter: cattrs.Converter,
    registry: ComponentRegistry,
    family: Family[Any],
    slot_type: Any,
    table: Any,
    default_name: str | None,
) -> PluginSlot | KLSlot:
    if not isinstance(table, Mapping):
        raise TypeError(f"expected a table, got {describe_value(table)}")
    slot_cls = next(t for t in (*typing.get_args(slot_type), slot_type) if attrs.has(t))
    core_keys = [f.name for f in attrs.fields(slot_cls) if f.name != "config"]
    core = {key: table[key] for key in core_keys if key in table}
    if default_name is not None:
        core.setdefault("name", default_name)
    errors: list[Exception] = []
    slot = None
    try:
        slot = structure_attrs(converter, slot_cls, core)
    except ClassValidationError as exc:
        errors.extend(exc.exceptions)
    config = None
    name = core.get("name")
    if isinstance(name, str):
        try:
            config_cls = registry.get(family, name).Config
        except UnknownComponentError as exc:
            default_note = "" if "name" in table else " (the default; set name to choose another)"
            errors.append(with_key(ValueError(f"{exc}{default_note}"), "name"))
        else:
            rest = {key: value for key, value in table.items() if key not in core_keys}
            try:
                config = structure_attrs(converter, config_cls, rest, extra_keys=core_keys)
            except ClassValidationError as exc:
                for sub in exc.exceptions:
                    if isinstance(sub, UnknownKeyError):
                        sub.hint = _other_components_option(registry, family, name, sub.key)
                errors.extend(exc.exceptions)
    if errors:
        raise ClassValidationError(f"while structuring {slot_cls.__name__}", errors, slot_cls)
    return attrs.evolve(slot, config=config)  # type: ignore[misc]


def _other_components_option(registry: ComponentRegistry, family: Family[Any], chosen: str, key: str) -> str:
    """`` (an option of engine "vllm"; this engine is "hf")`` when other components of the family
    take ``key``, else ``""`` (then the key's name decides the hint)."""
    owners = []
    for other in registry.names(family):
        config_cls = registry.get(family, other).Config if other != chosen else None
        if config_cls is not None and attrs.has(config_cls) and key in attrs.fields_dict(config_cls):
            owners.append(f'"{other}"')
    if not owners:
        return ""
    listed = owners[0] if len(owners) == 1 else f"{', '.join(owners[:-1])} and {owners[-1]}"
    return f' (an option of {family} {listed}; this {family} is "{chosen}")'


def structure_components(
    converter: cattrs.Converter, registry: ComponentRegistry, family: Family[Any], table: Any
) -> dict[str, Any]:
    """Structure a ``<name> = {config}`` table of a family (``[verifiers]``): name -> ``Config``."""
    if not isinstance(table, Mapping):
        raise TypeError(f"expected a table, got {describe_value(table)}")
    configs: dict[str, Any] = {}
    errors: list[Exception] = []
    for name, sub in table.items():
        try:
            configs[name] = structure_attrs(converter, registry.get(family, name).Config, sub)
        except UnknownComponentError as exc:
            errors.append(with_key(ValueError(str(exc)), name))
        except (ClassValidationError, ValueError, TypeError) as exc:
            errors.append(with_key(exc, name))
    if errors:
        raise ClassValidationError(f"while structuring [{family}]", errors, dict)
    return configs
