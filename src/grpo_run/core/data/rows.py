"""Checking prompt rows: the one place a row is validated, once, when the data loads.

A row is a mapping with ``id``, ``messages`` (a chat, list of ``{"role", "content"}``) or
``prompt`` (plain text), ``ground_truth`` and ``verifier`` (a verifier name, or a list of names
with a matching list of ground truths). Every verifier a row names must be enabled. A row may name
no verifier when an enabled verifier scores every row (``all_rows``); it then needs no ground
truth either.

:func:`map_columns` turns a row as a data source has it (``question`` / ``answer`` columns, say)
into that shape, following the source's column mapping.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import attrs

from grpo_run.core.errors import UserError


class DataError(UserError):
    """Unusable prompt data; the message names the file and line or row."""


@attrs.frozen
class ColumnMap:
    """Which columns of a source hold what (see :class:`~grpo_run.core.config.data_sections.DataSource`)."""

    dataset: str
    prompt_key: str | None = None
    messages_key: str | None = None
    ground_truth_key: str = "ground_truth"
    verifier: str | None = None
    verifier_key: str = "verifier"
    id_key: str = "id"
    system_prompt: str | None = None


def map_columns(fields: Mapping[str, Any], columns: ColumnMap, index: int, where: str) -> dict[str, Any]:
    """The row in the standard keys; the source's own columns stay too (verifiers may read them)."""
    row = dict(fields)
    row["dataset"] = columns.dataset
    row["id"] = row[columns.id_key] if row.get(columns.id_key) is not None else f"{columns.dataset}-{index}"
    if columns.messages_key is not None or (columns.prompt_key is None and "messages" in fields):
        key = columns.messages_key or "messages"
        row["messages"] = _column(fields, key, "messages_key", where)
        if key != "prompt":
            row.pop("prompt", None)  # the chat is the prompt; a stray "prompt" column must not compete
    else:
        key = columns.prompt_key or "prompt"
        option = "prompt_key" if columns.prompt_key else "prompt_key to the prompt column, or messages_key to a chat column"
        row["prompt"] = _column(fields, key, option, where)
        if key != "messages":
            row.pop("messages", None)
    if columns.ground_truth_key in fields:
        row["ground_truth"] = fields[columns.ground_truth_key]
    elif columns.ground_truth_key != "ground_truth":  # a mapped column must be there
        _column(fields, columns.ground_truth_key, "ground_truth_key", where)
    if fields.get(columns.verifier_key) is not None:
        row["verifier"] = fields[columns.verifier_key]
    elif columns.verifier is not None:
        row["verifier"] = columns.verifier
    else:
        row.pop("verifier", None)
    if columns.system_prompt is not None:
        _add_system_prompt(row, columns.system_prompt)
    return row


def _column(fields: Mapping[str, Any], key: str, option: str, where: str) -> Any:
    if key not in fields:
        have = ", ".join(sorted(map(str, fields))) or "none"
        raise DataError(f"{where}: no column {key!r} (the source's {option}); the row has: {have}")
    return fields[key]


def _add_system_prompt(row: dict[str, Any], system_prompt: str) -> None:
    """Put a system message first; a chat that already starts with one keeps its own."""
    if "messages" in row:
        msgs = row["messages"]
        if isinstance(msgs, list) and not (msgs and isinstance(msgs[0], Mapping) and msgs[0].get("role") == "system"):
            row["messages"] = [{"role": "system", "content": system_prompt}, *msgs]
    else:
        row["system_prompt"] = system_prompt


def normalise_row(
    row: Mapping[str, Any],
    where: str,
    enabled: Collection[str] | None = None,
    scores_every_row: bool = False,
    row_verifiers: bool = True,
) -> dict[str, Any]:
    """Check one row (already in the standard keys); errors start with ``where``.

    ``enabled``: the verifiers of the run; a row naming another one is an error that says which
    table to add (``None`` skips that check). ``scores_every_row``: some enabled verifier scores
    every row, so a row may name no verifier (and then needs no ground truth).
    ``row_verifiers=False``: the run ignores the rows' ``verifier`` column (``scoring.row_verifiers``),
    so it and ``ground_truth`` are plain data and not checked.
    """
    out = dict(row)
    if "messages" in out:
        msgs = out["messages"]
        if not isinstance(msgs, list) or not msgs or not all(
            isinstance(m, Mapping) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in msgs
        ):
            raise DataError(f"{where}: 'messages' must be a non-empty list of {{role, content}} objects with string "
                            f"values, got {_shown(msgs)}")
    elif "prompt" in out:
        if not isinstance(out["prompt"], str) or not out["prompt"]:
            raise DataError(f"{where}: 'prompt' must be a non-empty string, got {_shown(out['prompt'])}")
    else:
        raise DataError(f"{where}: a row needs 'messages' or 'prompt'")
    verifier = out.get("verifier")
    if not row_verifiers:
        return out
    if verifier is None:
        if not scores_every_row:
            raise DataError(f"{where}: names no verifier: set the source's verifier (or verifier_key to a column "
                            "that names one)")
        out.pop("verifier", None)
        return out
    if "ground_truth" not in out:
        raise DataError(f"{where}: no 'ground_truth' (set the source's ground_truth_key to the column that holds it)")
    _check_verifier(out, verifier, where)
    if enabled is not None:
        for name in verifier if isinstance(verifier, list) else [verifier]:
            if name not in enabled:
                raise DataError(
                    f"{where}: row asks for verifier {name!r}, which is not enabled; "
                    f"add a [verifiers.{name}] table (enabled: {', '.join(sorted(enabled)) or 'none'})"
                )
    return out


def _check_verifier(row: Mapping[str, Any], verifier: Any, where: str) -> None:
    if isinstance(verifier, list):
        gt = row["ground_truth"]
        if not all(isinstance(name, str) for name in verifier):
            raise DataError(f"{where}: 'verifier' must be a name or a list of names")
        if not isinstance(gt, list) or len(gt) != len(verifier):
            raise DataError(f"{where}: a list of verifiers needs a list of ground truths of the same length")
        if len(set(verifier)) != len(verifier):
            raise DataError(f"{where}: 'verifier' names a verifier twice: {verifier!r}")
    elif not isinstance(verifier, str):
        raise DataError(f"{where}: 'verifier' must be a name or a list of names, got {_shown(verifier)}")


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"
