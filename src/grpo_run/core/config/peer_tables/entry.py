"""One entry of the peer-name tables: where a key of another framework lives in grpo-run."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from grpo_run.core.config.toml_writer import toml_value


class Omit:
    """What a :attr:`Peer.convert` returns for a value that sets nothing here (``use_peft = false``)."""

    def __repr__(self) -> str:
        return "OMIT"


OMIT = Omit()


class NoEquivalentValue(ValueError):
    """A value of a peer key that grpo-run has no counterpart for (``loss_type = "sapo"``); the
    message says why."""


@attrs.frozen
class Peer:
    """Where a peer framework's key lives in grpo-run -- or that it has no counterpart, and why.

    Exactly one of ``to``, ``says``, ``none`` and ``table`` is set. ``to`` is a grpo-run key path
    (``optim.lr``; ``data.train.split`` is a key of each ``[[data.train]]`` table; ``loss.clip_lower``
    an option of the chosen loss), which the meta-test checks exists. ``grpo-run import`` puts the
    value there, through ``convert`` when the two frameworks spell values differently, and sets
    ``also`` beside it.
    """

    to: str | None = None
    note: str = ""
    """What differs, appended to the pointer: starts with its own punctuation (``", in steps"``)."""
    also: Mapping[str, Any] = attrs.field(factory=dict)
    """Settings that go with ``to`` (``{"engine.name": "vllm"}``)."""
    convert: Callable[[Any], Any] | None = None
    """The peer's value -> grpo-run's; :data:`OMIT` to set nothing, :class:`NoEquivalentValue` for a
    value with no counterpart."""
    says: str | None = None
    """A pointer that is not one key (``"a [verifiers.<name>] table per reward"``)."""
    none: str | None = None
    """Why grpo-run has no equivalent."""
    table: str | None = None
    """A peer table whose keys are looked up one by one; the text describes it."""

    def __attrs_post_init__(self) -> None:
        if sum(x is not None for x in (self.to, self.says, self.none, self.table)) != 1:
            raise ValueError("a peer entry needs exactly one of to, says, none and table")

    @property
    def hint(self) -> str:
        """``grpo-run calls it optim.lr`` / ``grpo-run has no equivalent: ...``."""
        if self.none is not None:
            return f"grpo-run has no equivalent: {self.none}"
        if self.table is not None:
            return self.table
        if self.says is not None:
            return f"grpo-run calls it {self.says}{self.note}"
        extra = ", ".join(f"{k} = {toml_value(v)}" for k, v in self.also.items())
        return f"grpo-run calls it {self.to}" + (f" with {extra}" if extra else "") + self.note


def key(to: str, note: str = "", *, also: Mapping[str, Any] | None = None,
        convert: Callable[[Any], Any] | None = None) -> Peer:
    """A key that has a counterpart: ``to`` (a grpo-run key path)."""
    return Peer(to=to, note=note, also=dict(also or {}), convert=convert)


def says(text: str, note: str = "") -> Peer:
    """A counterpart that is not one key."""
    return Peer(says=text, note=note)


def no(why: str) -> Peer:
    """No counterpart in grpo-run, and why."""
    return Peer(none=why)


def table(what: str) -> Peer:
    """A peer table: its keys are looked up one by one."""
    return Peer(table=what)


def mapped(choices: Mapping[Any, Any], what: str) -> Callable[[Any], Any]:
    """A ``convert`` from a table of values; a value not in it has no equivalent."""

    def convert(value: Any) -> Any:
        probe = value.lower() if isinstance(value, str) else value
        if probe in choices:
            return choices[probe]
        raise NoEquivalentValue(f"{what} {value!r} has no equivalent (known: {', '.join(map(str, choices))})")

    return convert


def enables(value: Any) -> Any:
    """A boolean that switches a table on: true -> an empty table (its defaults), false -> nothing."""
    return {} if truthy(value) else OMIT


def inverted(value: Any) -> Any:
    """A boolean the other way round (``disable_gradient_checkpointing`` -> ``gradient_checkpointing``)."""
    return not truthy(value)


def truthy(value: Any) -> bool:
    """A peer's boolean: ``True``, ``"true"``, ``"True"``, ``1``."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)
