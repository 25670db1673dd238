"""The ``tensorboard`` tracker: scalars per step and sample completions as a text table, in
TensorBoard event files (written with ``torch.utils.tensorboard``; extra ``tensorboard``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from grpo_run import CompletionTrace, ConfigIssue, RunConfig
from grpo_run.plugins.trackers.common import TABLE_COLUMNS, finite_scalars, missing_package, table_rows

MAX_TEXT_ROWS = 64
"""Completions shown per text table (TensorBoard renders long tables slowly)."""


@attrs.frozen
class TensorBoardConfig:
    """Options of the ``tensorboard`` tracker."""

    log_dir: str | None = None
    """Event file directory; default ``<run_dir>/tensorboard`` (``tensorboard --logdir`` it)."""

    def check_run(self, run: RunConfig) -> list[ConfigIssue]:
        return missing_package("tensorboard", "tensorboard", "tensorboard")


class TensorBoardTracker:
    """Writes every finite metric as a scalar at its step, and each rollout trace's first
    completions as a markdown table under ``completions/<kind>``."""

    name = "tensorboard"
    Config = TensorBoardConfig

    def __init__(self, config: TensorBoardConfig, run_dir: str) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = Path(config.log_dir) if config.log_dir else Path(run_dir) / "tensorboard"
        self.writer = SummaryWriter(log_dir=str(self.log_dir))

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        for key, value in finite_scalars(metrics).items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def log_completions(self, step: int, kind: str, traces: Sequence[CompletionTrace]) -> None:
        rows = table_rows(traces[:MAX_TEXT_ROWS])
        self.writer.add_text(f"completions/{kind}", markdown_table(TABLE_COLUMNS, rows), step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def markdown_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A markdown table (TensorBoard's text plugin renders markdown); cells stay on one line."""

    def cell(value: Any) -> str:
        text = "" if value is None else str(value)
        return text.replace("\\", "\\\\").replace("|", "\\|").replace("\r", "").replace("\n", "<br>")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
