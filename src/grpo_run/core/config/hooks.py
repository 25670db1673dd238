"""Strict ``cattrs`` structuring hooks for TOML data (installed by :func:`register_strict_hooks`).

Compared with a stock ``cattrs.Converter``, a converter with these hooks is strict and complete:

* scalars are not coerced: ``bool`` only from booleans, ``int`` only from integers (not
  booleans), ``float`` from integers or floats, ``str`` only from strings;
* tuples and lists only from arrays; ``Literal`` values must be one of the allowed ones;
* unknown keys are errors, with a "did you mean";
* every problem in a table is collected, including each field's ``attrs`` validator (run one by
  one, so two bad values are two errors), before a group error is raised; the class's own
  cross-field checks (``__attrs_post_init__``) then run by constructing it.
"""

from __future__ import annotations

import collections.abc
import functools
import types
import typing
from collections.abc import Callable, Collection, Mapping
from typing import Any, Literal

import attrs
import cattrs
from cattrs.errors import ClassValidationError, IterableValidationError

from grpo_run.core.config.formatting import MissingKeyError, describe_value, unknown_key_error, with_key
from grpo_run.core.errors import PluginError
from grpo_run.core.plugins.registry import did_you_mean

_SEQUENCE_ORIGINS = (tuple, list, collections.abc.Sequence)
_MAPPING_ORIGINS = (dict, collections.abc.Mapping)


def register_strict_hooks(converter: cattrs.Converter) -> None:
    """Install the strict hooks on ``converter``: scalars, literals, unions, arrays, tables, attrs classes."""
    for cls, kind in ((bool, "a boolean"), (int, "an integer"), (float, "a float"), (str, "a string")):
        converter.register_structure_hook(cls, functools.partial(_structure_scalar, kind=kind))
    converter.register_structure_hook_func(_is_literal, _structure_literal)
    converter.register_structure_hook_func(_is_union, functools.partial(_structure_union, converter))
    converter.register_structure_hook_func(
        _has_origin(_SEQUENCE_ORIGINS), functools.partial(_structure_sequence, converter)
    )
    converter.register_structure_hook_func(
        _has_origin(_MAPPING_ORIGINS), functools.partial(_structure_mapping, converter)
    )
    converter.register_structure_hook_factory(
        attrs.has, lambda cls: functools.partial(structure_attrs, converter, cls)
    )


# ---------------------------------------------------------------------------------------------
# attrs classes
# ---------------------------------------------------------------------------------------------


def structure_attrs(
    converter: cattrs.Converter, cls: type, data: Any, _type: Any = None, extra_keys: Collection[str] = ()
) -> Any:
    """Structure the table ``data`` into the attrs class ``cls``, collecting every error.

    ``extra_keys`` are keys the caller handles itself: they are skipped here but offered as
    "did you mean" suggestions.
    """
    if not isinstance(data, Mapping):
        raise TypeError(f"expected a table, got {describe_value(data)}")
    fields = [f for f in attrs.fields(cls) if f.init]
    hints = _type_hints(cls)
    by_key = {f.name: f for f in fields}
    errors: list[Exception] = [
        unknown_key_error(key, [*by_key, *extra_keys], data[key])
        for key in data
        if key not in by_key and key not in extra_keys
    ]
    values: dict[str, Any] = {}
    failed: set[str] = set()
    for f in fields:
        if f.name not in data:
            if f.default is attrs.NOTHING:
                errors.append(with_key(MissingKeyError("missing required key"), f.name))
                failed.add(f.name)
            continue
        try:
            values[f.name] = converter.structure(data[f.name], hints.get(f.name, f.type or Any))
        except Exception as exc:  # noqa: BLE001 - every structuring error is reported, with its key
            errors.append(with_key(exc, f.name))
            failed.add(f.name)
    errors.extend(_validate_fields(cls, values, failed, lenient=bool(errors)))
    if errors:
        raise ClassValidationError(f"while structuring {cls.__name__}", errors, cls)
    try:
        return cls(**{by_key[name].alias: value for name, value in values.items()})
    except (ValueError, TypeError) as exc:  # the class's own cross-field checks
        raise ClassValidationError(f"while structuring {cls.__name__}", [exc], cls) from None


def _validate_fields(cls: type, values: dict[str, Any], failed: set[str], lenient: bool) -> list[Exception]:
    """Run each field's validator on its own, so that every bad value is reported.

    The validators see a half-built instance holding the structured values and the defaults,
    as they would during ``__init__``. With ``lenient`` (other errors were already found), a
    validator that trips over a missing or defaulted neighbour is ignored instead of raised.
    """
    inst = object.__new__(cls)
    errors: list[Exception] = []
    checked: dict[str, Any] = {}
    for f in attrs.fields(cls):
        if f.name in values:
            try:
                value = checked[f.name] = _converted(f, values[f.name], inst)
            except (ValueError, TypeError) as exc:  # an attrs field converter refused the value
                errors.append(with_key(exc, f.name))
                continue
        elif f.name in failed or f.default is attrs.NOTHING:
            continue
        elif isinstance(f.default, attrs.Factory):  # type: ignore[arg-type]
            value = f.default.factory(inst) if f.default.takes_self else f.default.factory()
        else:
            value = f.default
        object.__setattr__(inst, f.name, value)
    for f in attrs.fields(cls):
        if f.validator is None or f.name not in checked:
            continue  # defaults are the class author's responsibility; failed fields already erred
        try:
            f.validator(inst, f, checked[f.name])
        except (ValueError, TypeError) as exc:
            errors.append(with_key(exc, f.name))
        except Exception:
            if not lenient:
                raise
    return errors


def _converted(f: attrs.Attribute, value: Any, inst: Any) -> Any:
    """``value`` after the field's own ``attrs`` converter, as ``__init__`` would store it."""
    conv = f.converter
    if conv is None:
        return value
    if isinstance(conv, attrs.Converter):
        args = [value] + ([inst] if conv.takes_self else []) + ([f] if conv.takes_field else [])
        return conv.converter(*args)  # type: ignore[misc]
    return conv(value)


def _type_hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception as exc:  # noqa: BLE001 - string annotations that cannot be evaluated
        if any(isinstance(f.type, str) for f in attrs.fields(cls)):
            raise PluginError(
                f"cannot resolve the field types of {cls.__module__}.{cls.__qualname__} ({exc}); "
                "define the Config class at module level or import the names its annotations use"
            ) from exc
        return {}


# ---------------------------------------------------------------------------------------------
# Scalars, literals, unions, arrays, tables
# ---------------------------------------------------------------------------------------------


def _structure_scalar(value: Any, cls: type, kind: str) -> Any:
    base = next(b for b in (bool, int, float, str) if issubclass(cls, b))
    ok = isinstance(value, base) and not (base is int and isinstance(value, bool))
    if base is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok:
        raise TypeError(f"expected {kind}, got {describe_value(value)}")
    return base(value) if cls is base else cls(value)  # subclasses: str/int enums


def _is_literal(tp: Any) -> bool:
    return typing.get_origin(tp) is Literal


def _structure_literal(value: Any, tp: Any) -> Any:
    allowed = typing.get_args(tp)
    for choice in allowed:
        if type(value) is type(choice) and value == choice:
            return choice
    hint = did_you_mean(value, [c for c in allowed if isinstance(c, str)]) if isinstance(value, str) else ""
    choices = ", ".join(repr(c) for c in allowed)
    got = f"got {value!r}; {hint.strip()[1:-1]}" if hint else f"got {value!r}"  # one parenthesis
    raise ValueError(f"must be one of {choices} ({got})")


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def _structure_union(converter: cattrs.Converter, value: Any, tp: Any) -> Any:
    arms = typing.get_args(tp)
    if value is None and type(None) in arms:
        return None
    arms = tuple(a for a in arms if a is not type(None))
    # Try the arm whose type the value already has first: 3 for ``float | int`` stays an int.
    ordered = sorted(arms, key=lambda a: type(value) is not a)
    failures: list[Exception] = []
    for arm in ordered:
        try:
            return converter.structure(value, arm)
        except Exception as exc:  # noqa: BLE001 - try the next arm
            failures.append(exc)
    if len(failures) == 1:
        raise failures[0]
    names = " or ".join(_type_name(a) for a in arms)
    raise TypeError(f"expected {names}, got {describe_value(value)}")


def _type_name(tp: Any) -> str:
    if _is_literal(tp):
        return " or ".join(repr(c) for c in typing.get_args(tp))
    if attrs.has(tp) or typing.get_origin(tp) in _MAPPING_ORIGINS:
        return "a table"
    if typing.get_origin(tp) in _SEQUENCE_ORIGINS:
        return "an array"
    return {bool: "a boolean", int: "an integer", float: "a float", str: "a string"}.get(tp, str(tp))


def _has_origin(origins: tuple[type, ...]) -> Callable[[Any], bool]:
    return lambda tp: tp in origins or typing.get_origin(tp) in origins


def _structure_sequence(converter: cattrs.Converter, value: Any, tp: Any) -> Any:
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"expected an array, got {describe_value(value)}")
    args = typing.get_args(tp)
    origin = typing.get_origin(tp) or tp
    if origin is tuple and args and args[-1] is not Ellipsis:
        if len(value) != len(args):
            raise ValueError(f"expected an array of {len(args)} items, got {len(value)}")
        item_types = list(args)
    else:
        item_types = [args[0] if args else Any] * len(value)
    items, errors = [], []
    for i, (item, item_type) in enumerate(zip(value, item_types, strict=True)):
        try:
            items.append(converter.structure(item, item_type))
        except Exception as exc:  # noqa: BLE001 - report every bad item
            errors.append(with_key(exc, i))
    if errors:
        raise IterableValidationError(f"while structuring {tp}", errors, tp)
    return list(items) if origin is list else tuple(items)


def _structure_mapping(converter: cattrs.Converter, value: Any, tp: Any) -> dict[Any, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"expected a table, got {describe_value(value)}")
    args = typing.get_args(tp)
    key_type, value_type = args if len(args) == 2 else (Any, Any)
    out, errors = {}, []
    for key, item in value.items():
        try:
            out[converter.structure(key, key_type)] = converter.structure(item, value_type)
        except Exception as exc:  # noqa: BLE001 - report every bad entry
            errors.append(with_key(exc, str(key)))
    if errors:
        raise ClassValidationError(f"while structuring {tp}", errors, dict)
    return out
