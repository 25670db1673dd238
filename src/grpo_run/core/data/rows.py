"""Checking prompt rows: the one place a row is validated, once, when the data loads.

A row is a mapping with ``id``, ``messages`` (a chat, list of ``{"role", "content"}``) or
``prompt`` (plain text), ``ground_truth`` and ``verifier`` (a verifier name, or a list of names
with a matching list of ground truths). Every verifier a row names must be enabled.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from grpo_run.core.errors import UserError


class DataError(UserError):
    """Unusable prompt data; the message names the file and line or row."""


def normalise_row(
    row: Mapping[str, Any],
    index: int,
    split: str,
    default_verifier: str | None,
    enabled: Collection[str] | None = None,
) -> dict[str, Any]:
    """Check one row, fill ``id`` and ``verifier``; errors name the row's origin.

    ``enabled``: the verifiers of the run; a row naming another one is an error that says which
    table to add (``None`` skips that check).
    """
    where = row.get("_source") or f"{split} row {index}"
    out = dict(row)
    out.setdefault("id", f"{split}-{index}")
    if "messages" in out:
        msgs = out["messages"]
        if not isinstance(msgs, list) or not all(isinstance(m, Mapping) and "role" in m and "content" in m for m in msgs):
            raise DataError(f"{where}: 'messages' must be a list of {{role, content}} objects")
    elif "prompt" in out:
        if not isinstance(out["prompt"], str):
            raise DataError(f"{where}: 'prompt' must be a string")
    else:
        raise DataError(f"{where}: a row needs 'messages' or 'prompt'")
    if "ground_truth" not in out:
        raise DataError(f"{where}: missing 'ground_truth'")
    verifier = out.get("verifier", default_verifier)
    if verifier is None:
        raise DataError(f"{where}: missing 'verifier' (or set data.default_verifier)")
    if isinstance(verifier, list):
        gt = out["ground_truth"]
        if not all(isinstance(name, str) for name in verifier):
            raise DataError(f"{where}: 'verifier' must be a name or a list of names")
        if not isinstance(gt, list) or len(gt) != len(verifier):
            raise DataError(f"{where}: a list of verifiers needs a list of ground truths of the same length")
        if len(set(verifier)) != len(verifier):
            raise DataError(f"{where}: 'verifier' names a verifier twice: {verifier!r}")
    elif not isinstance(verifier, str):
        raise DataError(f"{where}: 'verifier' must be a name or a list of names")
    out["verifier"] = verifier
    if enabled is not None:
        for name in verifier if isinstance(verifier, list) else [verifier]:
            if name not in enabled:
                raise DataError(
                    f"{where}: row asks for verifier {name!r}, which is not enabled; "
                    f"add a [verifiers.{name}] table (enabled: {', '.join(sorted(enabled)) or 'none'})"
                )
    return out
