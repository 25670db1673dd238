"""Pieces shared by the built-in trackers: the missing-extra rule, finite scalars, and the
columns of a completions table."""

from __future__ import annotations

import importlib.util
import json
import math
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from grpo_run import CompletionTrace, ConfigIssue

TABLE_COLUMNS = ("kind", "step", "row_id", "sample", "prompt", "completion", "ground_truth", "reward",
                 "solved", "scores", "advantage", "filtered", "finish_reason", "num_tokens", "policy_version")
"""Columns of the sample-completions table every tracker shows."""


def missing_package(tracker: str, module: str, extra: str) -> list[ConfigIssue]:
    """A config issue when ``module`` cannot be imported: the tracker needs its extra."""
    if importlib.util.find_spec(module) is not None:
        return []
    return [ConfigIssue(f"trackers.{tracker}",
                        f"needs the {module} package: pip install 'grpo-run[{extra}]'")]


def finite_scalars(metrics: Mapping[str, float]) -> dict[str, float]:
    """The metrics as floats, without NaN and infinities (which the tools reject or mangle)."""
    out = {}
    for key, value in metrics.items():
        value = float(value)
        if math.isfinite(value):
            out[key] = value
    return out


def table_row(trace: CompletionTrace) -> list[Any]:
    """One trace as a row of :data:`TABLE_COLUMNS` (structured values as JSON text)."""
    record = trace.to_json()
    row = []
    for column in TABLE_COLUMNS:
        value = record[column]
        if isinstance(value, (dict, list)) or (column == "ground_truth" and not isinstance(value, str)):
            value = json.dumps(value, ensure_ascii=False)  # one type per column: tables infer it
        row.append(value)
    return row


def table_rows(traces: Sequence[CompletionTrace]) -> list[list[Any]]:
    return [table_row(t) for t in traces]


def run_config(run_dir: str) -> dict[str, Any]:
    """The run's effective config (``config.toml`` in the run directory), or {} when absent."""
    path = Path(run_dir) / "config.toml"
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return {}
