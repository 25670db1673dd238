"""The ``jsonl`` tracker: one JSON object per step in ``<run_dir>/metrics.jsonl``."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

import attrs


@attrs.frozen
class JsonlTrackerConfig:
    """Options of the ``jsonl`` tracker."""

    filename: str = "metrics.jsonl"


class JsonlTracker:
    """Appends ``{"step": n, **metrics}`` lines, flushed after each step so nothing is lost."""

    name = "jsonl"
    Config = JsonlTrackerConfig

    def __init__(self, config: JsonlTrackerConfig, run_dir: str) -> None:
        self.path = Path(run_dir) / config.filename
        self._fh = self.path.open("a", encoding="utf-8")

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        record = {"step": step}
        for key, value in metrics.items():
            value = float(value)
            record[key] = value if math.isfinite(value) else None  # JSON has no NaN
        self._fh.write(json.dumps(record) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()
