"""The console view of a run: a rich progress bar with the headline numbers."""

from __future__ import annotations

import sys
from collections.abc import Mapping

from rich.console import Console
from rich.text import Text
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class RunProgress:
    """Shows step, reward, eval accuracy and tokens/s; plain lines when not on a terminal."""

    def __init__(self, total_steps: int, enabled: bool = True) -> None:
        self.console = Console(stderr=True)
        self.live = enabled and sys.stderr.isatty()
        self.total = total_steps
        self.eval_accuracy: float | None = None
        self._progress: Progress | None = None
        if self.live:
            self._progress = Progress(
                TextColumn("[bold]grpo-run"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[info]}"),
                console=self.console,
            )
            self._task = self._progress.add_task("train", total=total_steps, info="")
            self._progress.start()

    def message(self, text: str) -> None:
        """Print ``text`` as it is (never read as rich markup: ``[verifiers.math]`` stays)."""
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def warning(self, text: str) -> None:
        """``warning: <text>``, the label styled, the text literal."""
        self.console.print(Text.assemble(("warning:", "yellow"), " ", text), soft_wrap=True)

    def update(self, step: int, metrics: Mapping[str, float]) -> None:
        if "eval/accuracy" in metrics:
            self.eval_accuracy = metrics["eval/accuracy"]
        if step == 0:
            return  # the starting eval is reported on its own line
        acc = "-" if self.eval_accuracy is None else f"{self.eval_accuracy:.3f}"
        info = (
            f"reward {metrics.get('reward/mean', float('nan')):.3f}  eval acc {acc}  "
            f"gen {metrics.get('perf/generation_tokens_per_s', 0):.0f} tok/s  "
            f"{metrics.get('perf/step_s', 0):.2f} s/step"
        )
        if self._progress is not None:
            self._progress.update(self._task, completed=step, info=info)
        elif step % 10 == 0 or "eval/accuracy" in metrics or step == self.total:
            self.console.print(f"step {step}/{self.total}  {info}", markup=False, highlight=False)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
