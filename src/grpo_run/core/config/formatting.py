"""The formatter that turns the ``cattrs`` exception tree raised while structuring into one
:class:`~grpo_run.core.errors.ConfigIssue` per problem, and the unknown-key messages.

``cattrs.transform_error`` would flatten the same tree, but its default formatter replaces an
``attrs`` validator's message with a generic one; ours keeps the validator's own words and only
drops what the key path already says.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

from cattrs.errors import AttributeValidationNote, IterableValidationNote

from grpo_run.core.config.peer_names import is_peer_table, peer_leaves, unknown_key_hint
from grpo_run.core.config.toml_writer import toml_key
from grpo_run.core.errors import ConfigIssue
from grpo_run.core.plugins.registry import did_you_mean

_TOML_TYPES: tuple[tuple[type, str], ...] = (
    (bool, "boolean"),
    (int, "integer"),
    (float, "float"),
    (str, "string"),
    (Mapping, "table"),
    (list, "array"),
    (tuple, "array"),
    (datetime.datetime, "datetime"),
    (datetime.date, "date"),
    (datetime.time, "time"),
)
# attrs' comparison validators (gt, ge, lt, le) say "'lr' must be > 0: -1".
_ATTRS_COMPARISON = re.compile(r"^'(?P<name>[^']+)' must be (?P<op>[<>]=?) (?P<bound>.+): (?P<got>.+)$", re.S)


class UnknownKeyError(ValueError):
    """A key that the table's class does not have; the message says where grpo-run keeps it, once
    the whole key path is known (:func:`issues_from_exception`)."""

    def __init__(self, key: str, allowed: Collection[str], value: Any = None, hint: str = "") -> None:
        self.key, self.allowed, self.value = key, list(allowed), value
        self.hint = hint
        """Set by the caller when it knows better than the key's name (another component's option)."""
        super().__init__(self.message((key,)))

    def message(self, path: Sequence[str | int]) -> str:
        """``unknown key (grpo-run calls it optim.lr)`` for the key at ``path``."""
        # What grpo-run knows a key to mean (a peer's name, another table's key) beats a close spelling.
        hint = self.hint or unknown_key_hint(path) or did_you_mean(self.key, sorted(self.allowed))
        return f"unknown key{hint}"


class MissingKeyError(ValueError):
    """A required key (a field without a default) that the table lacks."""


def toml_type_name(value: Any) -> str:
    """The TOML name of a value's type (``string``, ``integer``, ``table``, ...)."""
    for cls, name in _TOML_TYPES:
        if isinstance(value, cls):
            return name
    return type(value).__name__


def describe_value(value: Any) -> str:
    """``string 'abc'``, ``integer 3``, ``table`` -- for "expected X, got Y" messages."""
    kind = toml_type_name(value)
    if isinstance(value, Mapping):
        return kind
    shown = ("true" if value else "false") if isinstance(value, bool) else repr(value)
    return f"{kind} {shown if len(shown) <= 60 else shown[:57] + '...'}"


def with_key(exc: Exception, key: str | int) -> Exception:
    """Attach the ``cattrs`` note that puts ``exc`` under ``key`` in the error path."""
    if isinstance(key, int):
        exc.add_note(IterableValidationNote(f"index {key}", key, Any))
    else:
        exc.add_note(AttributeValidationNote(f"key {key!r}", key, Any))
    return exc


def unknown_key_error(key: str, allowed: Collection[str], value: Any = None) -> UnknownKeyError:
    """``unknown key (grpo-run calls it optim.lr)`` when ``key`` is a peer framework's name or a key
    of another table, else ``unknown key (did you mean 'temperature'?)``; placed under ``key``.
    ``value``: what the table holds under it (a peer's table is looked into key by key)."""
    exc = UnknownKeyError(key, allowed, value)
    with_key(exc, key)
    return exc


def join_path(parts: Sequence[str | int]) -> str:
    """``("optim", "betas", 1)`` -> ``"optim.betas[1]"``."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + toml_key(part)
    return out


def issues_from_exception(exc: BaseException, path: Sequence[str | int] = ()) -> list[ConfigIssue]:
    """Every leaf error under ``exc`` (a ``cattrs`` validation group or a plain exception)."""
    return list(_walk(exc, tuple(path)))


def _walk(exc: BaseException, path: tuple[str | int, ...]) -> Iterator[ConfigIssue]:
    if isinstance(exc, BaseExceptionGroup):
        for sub in exc.exceptions:
            yield from _walk(sub, path + _note_parts(sub))
        return
    if isinstance(exc, UnknownKeyError):
        if not exc.hint and is_peer_table(path, exc.value):  # ROLL's [actor_train]: each of its keys
            for leaf, hint in peer_leaves(path, exc.value):
                yield ConfigIssue(join_path(leaf), f"unknown key{hint}")
            return
        yield ConfigIssue(join_path(path), exc.message(path))
        return
    yield ConfigIssue(join_path(path), describe_exception(exc, path[-1] if path else None))


def _note_parts(exc: BaseException) -> tuple[str | int, ...]:
    for note in getattr(exc, "__notes__", ()):
        if isinstance(note, AttributeValidationNote):
            return (note.name,)
        if isinstance(note, IterableValidationNote):
            return (note.index,)
    return ()


def describe_exception(exc: BaseException, key: str | int | None) -> str:
    """The message of one leaf error, minus a leading ``'<key>'`` that the path already shows.

    attrs comparison messages are reworded: ``'lr' must be > 0: -1`` -> ``must be > 0 (got -1)``.
    """
    # attrs' instance_of/in_ raise with (message, attribute, expected, value) as args.
    message = exc.args[0] if len(exc.args) > 1 and isinstance(exc.args[0], str) else str(exc)
    if not message:
        return type(exc).__name__
    match = _ATTRS_COMPARISON.match(message)
    if match and match["name"] == key:
        return f"must be {match['op']} {match['bound']} (got {match['got']})"
    prefix = f"'{key}' "
    if isinstance(key, str) and message.startswith(prefix):
        return message[len(prefix) :]
    return message
