"""The tool-call formats the ``chat-template`` renderer reads (``[renderer] tool_format``).

- ``hermes``: Hermes / Qwen 2.5-3, ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``,
  anywhere in the turn, any number of them (:func:`grpo_run.plugins.renderers.hermes.parse_hermes`).
- ``llama3-json``: Llama 3.1 / 3.2 custom tools, a turn that *is* the call:
  ``{"name": ..., "parameters": {...}}`` (``"arguments"`` accepted too), optionally after
  ``<|python_tag|>``, several separated by ``;``. A turn that starts with anything else is an
  answer, not a call.
- ``mistral``: Mistral's ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]``; the text before
  the marker is the turn's content.

Text inside ``<think>...</think>`` is never read for calls, in every format.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from grpo_run import ParsedTurn, ToolCall

THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL)
PYTHON_TAG = "<|python_tag|>"
MISTRAL_MARKER = "[TOOL_CALLS]"


def _call(body: Any, k: int, argument_keys: tuple[str, ...]) -> ToolCall | str:
    """A :class:`ToolCall` from one decoded JSON object, or the error that says why not."""
    wanted = " or ".join(f'{{"name": str, "{key}": object}}' for key in argument_keys)
    if not isinstance(body, dict) or not isinstance(body.get("name"), str):
        return f"tool call {k + 1}: expected {wanted}"
    arguments: Any = next((body[key] for key in argument_keys if key in body), {})
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            arguments = None
    if not isinstance(arguments, dict):
        return f"tool call {k + 1}: expected {wanted}"
    return ToolCall(body["name"], arguments, id=f"call_{k}")


def _collect(bodies: list[Any], argument_keys: tuple[str, ...], errors: list[str]) -> tuple[ToolCall, ...]:
    calls: list[ToolCall] = []
    for k, body in enumerate(bodies):
        call = _call(body, k, argument_keys)
        if isinstance(call, str):
            errors.append(call)
        else:
            calls.append(call)
    return tuple(calls)


def parse_llama3_json(text: str) -> ParsedTurn:
    """Tool calls of a Llama 3.1 / 3.2 JSON turn; unreadable ones become the parse error."""
    visible = THINK.sub("", text).strip()
    tagged = visible.startswith(PYTHON_TAG)
    body = visible[len(PYTHON_TAG):].lstrip() if tagged else visible
    if not body.startswith("{"):
        return ParsedTurn(text, (), f"{PYTHON_TAG} is not followed by a JSON tool call" if tagged else None)
    decoder = json.JSONDecoder()
    bodies: list[Any] = []
    errors: list[str] = []
    at = 0
    while at < len(body):
        try:
            obj, at = decoder.raw_decode(body, at)
        except json.JSONDecodeError as exc:
            errors.append(f"tool call {len(bodies) + 1}: not JSON ({exc.msg})")
            break
        bodies.append(obj)
        rest = body[at:].lstrip()
        if not rest:
            break
        if not rest.startswith(";"):
            errors.append(f"tool call {len(bodies)}: text after the JSON (separate calls with ';')")
            break
        at = len(body) - len(rest) + 1
        at += len(body[at:]) - len(body[at:].lstrip())
    calls = _collect(bodies, ("parameters", "arguments"), errors)
    return ParsedTurn(text, calls, "; ".join(errors) or None)


def parse_mistral(text: str) -> ParsedTurn:
    """Tool calls of a Mistral ``[TOOL_CALLS][...]`` turn; unreadable ones become the parse error."""
    visible = THINK.sub("", text)
    cut = visible.find(MISTRAL_MARKER)
    if cut < 0:
        return ParsedTurn(text)
    payload = visible[cut + len(MISTRAL_MARKER):].strip()
    try:
        bodies = json.loads(payload)
    except json.JSONDecodeError as exc:
        return ParsedTurn(text, (), f"the tool calls after {MISTRAL_MARKER} are not JSON ({exc.msg})")
    if not isinstance(bodies, list):
        bodies = [bodies]
    errors: list[str] = []
    calls = _collect(bodies, ("arguments",), errors)
    return ParsedTurn(text, calls, "; ".join(errors) or None)


def formats() -> dict[str, Callable[[str], ParsedTurn]]:
    """Every tool-call format but ``hermes`` (whose tags are configurable) by its config name."""
    return {"llama3-json": parse_llama3_json, "mistral": parse_mistral}
