"""Reading a run directory back: ``metrics.jsonl``, the rollout traces and the checkpoints, for
the report and the live page. Tolerant of a run still being written (a half-written last line
is skipped)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from grpo_run.core.errors import UserError
from grpo_run.core.loop.observers import METRICS_FILE
from grpo_run.core.loop.traces import ROLLOUTS_DIR

_TRACE_FILE = re.compile(r"^(step|eval)_(\d+)\.jsonl$")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file; lines that do not parse (a line still being
    written) are skipped."""
    out = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                out.append(record)
    return out


@attrs.frozen
class RunMetrics:
    """The steps of ``metrics.jsonl``; a metric absent from a step, or null there, has no point."""

    rows: list[dict[str, Any]]

    def keys(self) -> list[str]:
        seen: dict[str, None] = {}
        for row in self.rows:
            seen.update(dict.fromkeys(k for k in row if k != "step"))
        return list(seen)

    def series(self, key: str) -> tuple[list[int], list[float]]:
        steps, values = [], []
        for row in self.rows:
            value = row.get(key)
            if isinstance(value, (int, float)) and math.isfinite(value):
                steps.append(int(row["step"]))
                values.append(float(value))
        return steps, values

    def derived(self, keys: Iterable[str], combine: Any) -> tuple[list[int], list[float]]:
        """``combine(*values)`` at each step where every one of ``keys`` has a value."""
        keys = list(keys)
        steps, values = [], []
        for row in self.rows:
            parts = [row.get(k) for k in keys]
            if all(isinstance(p, (int, float)) and math.isfinite(p) for p in parts):
                steps.append(int(row["step"]))
                values.append(float(combine(*parts)))
        return steps, values

    @property
    def last(self) -> Mapping[str, Any]:
        return self.rows[-1] if self.rows else {}


def load_metrics(run_dir: Path, *, required: bool = True) -> RunMetrics:
    """``<run_dir>/metrics.jsonl``; a missing file is a :class:`UserError` when ``required``."""
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        if required:
            raise UserError(f"{run_dir}: not a run directory (no {METRICS_FILE})")
        return RunMetrics([])
    return RunMetrics([r for r in read_jsonl(path) if isinstance(r.get("step"), int)])


def trace_files(run_dir: Path, kind: str) -> dict[int, Path]:
    """``step -> path`` of the ``rollouts/step_<n>.jsonl`` (kind ``train``) or ``eval_<n>`` files."""
    prefix = "step" if kind == "train" else "eval"
    folder = Path(run_dir) / ROLLOUTS_DIR
    found = {}
    if folder.is_dir():
        for path in folder.iterdir():
            m = _TRACE_FILE.match(path.name)
            if m and m.group(1) == prefix:
                found[int(m.group(2))] = path
    return dict(sorted(found.items()))


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest ``checkpoints/step_<n>`` of a run, if any."""
    folder = Path(run_dir) / "checkpoints"
    steps = [(int(m.group(1)), p) for p in folder.glob("step_*") if (m := re.match(r"^step_(\d+)$", p.name))]
    return max(steps)[1] if steps else None
