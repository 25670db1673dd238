"""What an environment may return, checked inside the episode's failure boundary.

Every value an environment hands back (``reset``, ``step``, ``finish``, ``run_episode``) goes
through one of these functions before the runner uses it. A value outside the contract raises
:class:`BadReturn`, which the runner turns into a dropped, counted episode naming the call and
the value (docs/environments.md, "What an environment may return", is this module as a table).

Sizes are bounded while reading: messages are taken from any iterable, a generator included, at
most :data:`MAX_MESSAGES` + 1 of them, and a message's text is cut before it is checked, so an
endless iterator or a 1 GB string costs no more than the caps. Values are described for errors
without ``repr`` of the whole (a 100 MB message, ``10**5000``).
"""

from __future__ import annotations

import itertools
import json
import math
import reprlib
from collections.abc import Iterable, Mapping
from typing import Any

from grpo_run.core.plugins.episodes import EnvReset, EnvStep, EpisodeResult

MAX_MESSAGES = 64
"""Messages one ``reset`` or ``step`` may return (the first 65 are read to tell)."""
MAX_TOOLS = 64
"""Tool schemas one ``reset`` may offer."""
MAX_METRICS = 64
"""Metrics one ``step`` or ``run_episode`` may report."""
MAX_FIELDS = 16
"""Keys of one message (``role``, ``content``, ``name``, ``tool_call_id``, ...)."""


class BadReturn(Exception):
    """A value outside the environment contract; the message says which and why."""


def reset_parts(value: Any, *, max_chars: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Any]:
    """``(messages, tools, state)`` of what ``reset`` returned; each message's text cut at
    ``max_chars`` (``environment.max_opening_chars``), each tool schema at most that long as JSON."""
    if not isinstance(value, EnvReset):
        raise BadReturn(f"{describe(value)}, not an EnvReset")
    return (messages(value.messages, "messages", max_chars=max_chars), tools(value.tools, max_chars=max_chars),
            value.state)


def step_parts(value: Any, *, bounds: tuple[float, float], max_chars: int
               ) -> tuple[list[dict[str, Any]], float, bool, dict[str, float], Any]:
    """``(messages, reward, done, metrics, state)`` of what ``step`` returned; messages cut at
    ``max_chars`` (``environment.max_tool_output_chars``), the reward within ``bounds``."""
    if not isinstance(value, EnvStep):
        raise BadReturn(f"{describe(value)}, not an EnvStep")
    out = messages(value.messages, "messages", max_chars=max_chars)
    score = reward(value.reward, "reward", bounds)
    try:
        done = bool(value.done)
    except Exception as exc:  # an array's truth value, a raising __bool__
        raise BadReturn(f"done {describe(value.done)}, not a bool ({type(exc).__name__}: {exc})") from None
    return out, score, done, metrics(value.metrics, "metrics"), value.state


def episode_result(value: Any, *, bounds: tuple[float, float]) -> tuple[float, dict[str, float], str | None]:
    """``(reward, metrics, text)`` of what ``run_episode`` returned (an EpisodeResult or a number)."""
    if not isinstance(value, EpisodeResult):
        if isinstance(value, (bool, str, bytes)) or not hasattr(type(value), "__float__"):
            raise BadReturn(f"{describe(value)}, not an EpisodeResult or a number")
        return reward(value, "reward", bounds), {}, None
    text = value.text
    if text is not None:
        if not isinstance(text, str):
            raise BadReturn(f"text {describe(text)}, not a str or None")
        text_ok(text, "text")
    return reward(value.reward, "reward", bounds), metrics(value.metrics, "metrics"), text


# -- the pieces --------------------------------------------------------------------------------


def reward(value: Any, what: str, bounds: tuple[float, float]) -> float:
    """``value`` as a float in ``bounds`` (``environment.reward_range``). Not a bool (a swapped
    ``done``), a str or None; an int too large for a float is refused, not rounded to inf."""
    x = number(value, what, bools=False)
    low, high = bounds
    if not low <= x <= high:
        raise BadReturn(f"{what} {x!r}, outside environment.reward_range = [{low:g}, {high:g}]")
    return x


def number(value: Any, what: str, *, bools: bool = True) -> float:
    """A finite float from a real number (an int, float, numpy scalar or 0-d array)."""
    if (isinstance(value, bool) and not bools) or isinstance(value, (str, bytes, bytearray)) \
            or not hasattr(type(value), "__float__"):
        raise BadReturn(f"{what} {describe(value)}, not a number")
    try:
        x = float(value)
    except Exception as exc:  # OverflowError (10**400), a many-element array, a raising __float__
        raise BadReturn(f"{what} {describe(value)}, not a float ({type(exc).__name__}: {exc})") from None
    if not math.isfinite(x):
        raise BadReturn(f"{what} {x!r}, not a finite number")
    return x


def messages(value: Any, what: str, *, max_chars: int) -> list[dict[str, Any]]:
    """At most :data:`MAX_MESSAGES` messages from a list, tuple or any iterable (read lazily)."""
    if value is None or isinstance(value, (str, bytes, bytearray, Mapping)) or not isinstance(value, Iterable):
        raise BadReturn(f"{what} {describe(value)}, not a list of messages")
    taken = list(itertools.islice(iter(value), MAX_MESSAGES + 1))
    if len(taken) > MAX_MESSAGES:
        raise BadReturn(f"more than {MAX_MESSAGES} {what} in one call (an endless iterator?)")
    return [message(m, f"{what}[{i}]", max_chars) for i, m in enumerate(taken)]


def message(value: Any, what: str, max_chars: int) -> dict[str, Any]:
    """A chat message: str ``role`` and ``content`` (cut at ``max_chars``, with a note), every str
    value valid text (no lone surrogates), str keys."""
    if not isinstance(value, Mapping) or not isinstance(value.get("role"), str) \
            or not isinstance(value.get("content"), str):
        raise BadReturn(f"{what} {describe(value)}, not a message (a mapping with str role and content)")
    if len(value) > MAX_FIELDS:
        raise BadReturn(f"{what} has {len(value)} keys (at most {MAX_FIELDS})")
    out = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise BadReturn(f"{what} has the key {describe(key)}, not a str")
        if key == "content" and len(item) > max_chars:
            item = item[:max_chars] + f"... [cut at {max_chars} characters]"
        if isinstance(item, str):
            text_ok(item, f"{what}.{key}")
        out[key] = item
    return out


def tools(value: Any, *, max_chars: int) -> list[dict[str, Any]]:
    """Tool schemas: mappings that are JSON (what a chat template writes), each at most
    ``max_chars`` characters as JSON; at most :data:`MAX_TOOLS`."""
    if value is None or isinstance(value, (str, bytes, bytearray, Mapping)) or not isinstance(value, Iterable):
        raise BadReturn(f"tools {describe(value)}, not a list of tool schemas")
    taken = list(itertools.islice(iter(value), MAX_TOOLS + 1))
    if len(taken) > MAX_TOOLS:
        raise BadReturn(f"more than {MAX_TOOLS} tools")
    out = []
    for i, schema in enumerate(taken):
        if not isinstance(schema, Mapping):
            raise BadReturn(f"tools[{i}] {describe(schema)}, not a tool schema (a mapping in OpenAI function form)")
        try:
            size = len(json.dumps(schema, ensure_ascii=False, allow_nan=False).encode("utf-8"))
        except (TypeError, ValueError, RecursionError) as exc:  # UnicodeEncodeError is a ValueError
            raise BadReturn(f"tools[{i}] is not JSON ({type(exc).__name__}: {exc})") from None
        if size > max_chars:
            raise BadReturn(f"tools[{i}] is {size} bytes as JSON (more than environment.max_opening_chars = {max_chars})")
        out.append(dict(schema))
    return out


def metrics(value: Any, what: str) -> dict[str, float]:
    """Named finite numbers (bools count as 0/1); at most :data:`MAX_METRICS`."""
    if not isinstance(value, Mapping):
        raise BadReturn(f"{what} {describe(value)}, not a mapping of names to numbers")
    if len(value) > MAX_METRICS:
        raise BadReturn(f"{what} has {len(value)} entries (at most {MAX_METRICS})")
    out = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise BadReturn(f"{what} has the key {describe(key)}, not a str")
        text_ok(key, f"{what} key")
        out[key] = number(item, f"{what}[{key!r:.60}]")
    return out


def text_ok(text: str, what: str) -> None:
    """Refuse text that is not valid Unicode (a lone surrogate cannot be encoded, tokenised or written)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise BadReturn(f"{what} is not valid text: {exc.reason} {text[exc.start:exc.start + 1]!r} at "
                        f"character {exc.start}") from None


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 80
_REPR.maxlong = 40


def describe(value: Any) -> str:
    """A short description of ``value`` for an error: a cut repr and its type."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"an int of about {int(value.bit_length() * 0.30103)} digits"
    if isinstance(value, str) and len(value) > 80:
        return f"{value[:60]!r}... (a str of {len(value)} characters)"
    try:
        text = _REPR.repr(value)
    except Exception:  # a broken __repr__
        text = f"<{type(value).__name__} object>"
    return text if value is None or isinstance(value, (str, int, float)) else f"{text} ({type(value).__name__})"
