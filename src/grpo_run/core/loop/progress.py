"""The console view of a run: a rich progress bar with the headline numbers and an ETA, a warning
when steps keep being skipped for lack of reward spread, and the closing summary. The runs of a
sweep share one display (:class:`ProgressBoard`), a line each, their messages prefixed with their
names.

Text is always printed literally, never read as rich markup (``[verifiers.math]`` stays).
"""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from grpo_run.core.secrets import mask_secrets

SIGNAL_WINDOW = 10
"""Steps over which skipped steps are counted for the no-signal warning."""


def format_duration(seconds: float) -> str:
    """``0:42``, ``12:05``, ``3:02:11``."""
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Eta:
    """Time left: the remaining steps at the average pace since the first step seen (the last
    step's time before that), capped by what is left of ``train.max_runtime_s``."""

    def __init__(self, total_steps: int, max_runtime_s: float = 0.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.total = total_steps
        self.max_runtime_s = max_runtime_s
        self.clock = clock
        self.started = clock()
        self.first: tuple[int, float] | None = None

    def update(self, step: int, step_s: float | None = None) -> float | None:
        """Seconds left after ``step``; None when nothing is known yet."""
        now = self.clock()
        if self.first is None:
            self.first = (step, now)
        first_step, first_at = self.first
        if step > first_step:
            per_step = (now - first_at) / (step - first_step)
        elif step_s:
            per_step = step_s
        else:
            return None
        left = max(0, self.total - step) * per_step
        if self.max_runtime_s:
            left = min(left, max(0.0, self.max_runtime_s - (now - self.started)))
        return left


class SignalWatch:
    """Counts steps skipped because no group had a reward spread (every completion of each
    prompt scored the same, so the advantages are all zero) and says when more than half the
    steps of a window were, with the likely causes."""

    def __init__(self, total_steps: int, temperature: float, group_size: int, window: int = SIGNAL_WINDOW) -> None:
        self.window = max(1, min(window, total_steps))
        self.temperature = temperature
        self.group_size = group_size
        self.steps: list[tuple[int, bool, Mapping[str, float]]] = []
        self.failure: str | None = None
        """The window's first failed episode (environment, row, error), if any failed."""

    def add(self, step: int, metrics: Mapping[str, float], failure: str | None = None) -> str | None:
        """Record a finished step (``failure``: its batch's first failed episode); a warning text
        when it closes a window with too many skipped."""
        if step == 0:
            return None
        self.steps.append((step, metrics.get("rollout/sequences_trained") == 0.0, dict(metrics)))
        self.failure = self.failure or failure
        return self.flush() if len(self.steps) >= self.window else None

    def flush(self) -> str | None:
        """Close the current window (also at the end of a run, for a partial one of 2+ steps)."""
        steps, self.steps = self.steps, []
        failure, self.failure = self.failure, None
        skipped = [m for _, was_skipped, m in steps if was_skipped]
        if not steps or len(steps) < min(2, self.window) or 2 * len(skipped) <= len(steps):
            return None
        first, last = steps[0][0], steps[-1][0]
        failed = [m for m in skipped if m.get("env/error_rate", 0.0) > 0]
        if failed and failure is not None:  # groups were dropped for failed episodes: not the reward's fault
            episodes = sum(m.get("env/episodes", 0.0) for m in failed)
            errors = sum(m.get("env/error_rate", 0.0) * m.get("env/episodes", 0.0) for m in failed)
            return (
                f"{len(skipped)} of the last {len(steps)} steps ({first}-{last}) were skipped: {failure}; "
                f"{errors:.0f} of the {episodes:.0f} episodes of those steps failed, and a group with a failed "
                f"episode is dropped, so no group was left to learn from. Fix the environment (log.jsonl has "
                f"every failure)."
            )
        return (
            f"{len(skipped)} of the last {len(steps)} steps ({first}-{last}) were skipped: in every group all "
            f"completions of a prompt got the same reward, so there was nothing to learn. Likely causes: "
            f"{self._reward_cause(skipped)}; rollout.temperature = {self.temperature:g} is too low for varied "
            f"completions; rollout.num_samples_per_prompt_rollout = {self.group_size} is too small for a group "
            f"to differ."
        )

    @staticmethod
    def _reward_cause(skipped: list[Mapping[str, float]]) -> str:
        rewards = [m["reward/mean"] for m in skipped if "reward/mean" in m]
        solve_rates = [m["reward/solve_rate"] for m in skipped if "reward/solve_rate" in m]
        if rewards and max(abs(r) for r in rewards) == 0.0:
            return ("the reward is always 0 (the task is too hard for the model, or the verifier does not accept "
                    "its answers: read the completions in rollouts/, see logging.log_rollouts_every)")
        if solve_rates and min(solve_rates) == 1.0:
            return "every completion is solved (the task is too easy for the model)"
        mean = sum(rewards) / len(rewards) if rewards else float("nan")
        return f"the reward is all-or-nothing per prompt, always 0 or always the maximum (mean {mean:.3f})"


class ProgressBoard:
    """One progress display for several runs in one process (a sweep's variants): a line each,
    named; plain lines when not on a terminal."""

    def __init__(self, enabled: bool = True) -> None:
        self.console = Console(stderr=True)
        self.live = enabled and sys.stderr.isatty()
        self.progress: Progress | None = None
        if self.live:
            self.progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                TextColumn("{task.fields[eta]}"), TextColumn("{task.fields[info]}"), console=self.console,
            )
            self.progress.start()

    def message(self, text: str) -> None:
        self.console.print(mask_secrets(text), markup=False, highlight=False, soft_wrap=True)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()


class RunProgress:
    """Shows step, reward, eval accuracy, tokens/s and the ETA; plain lines when not on a terminal.

    ``board``: the display shared with the other runs of a sweep, where this run is the line
    ``label`` (its messages start with it)."""

    def __init__(self, total_steps: int, enabled: bool = True, *, temperature: float = 1.0, group_size: int = 8,
                 max_runtime_s: float = 0.0, clock: Callable[[], float] = time.monotonic,
                 board: ProgressBoard | None = None, label: str = "") -> None:
        self.board = board
        self.prefix = f"{label}: " if label else ""
        self.console = board.console if board is not None else Console(stderr=True)
        self.live = board.live if board is not None else enabled and sys.stderr.isatty()
        self.total = total_steps
        self.eval_accuracy: float | None = None
        self.eta = Eta(total_steps, max_runtime_s, clock)
        self.signal = SignalWatch(total_steps, temperature, group_size)
        self._said_skipped_updates = False
        self._progress: Progress | None = None
        if board is not None and board.progress is not None:
            self._progress = board.progress
            self._task = board.progress.add_task(label, total=total_steps, info="", eta="")
        elif self.live:
            self._progress = Progress(
                TextColumn("[bold]grpo-run"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[eta]}"),
                TextColumn("{task.fields[info]}"),
                console=self.console,
            )
            self._task = self._progress.add_task("train", total=total_steps, info="", eta="")
            self._progress.start()

    def message(self, text: str) -> None:
        """Print ``text`` as it is (never read as rich markup: ``[verifiers.math]`` stays), secrets masked."""
        self.console.print(mask_secrets(self.prefix + text), markup=False, highlight=False, soft_wrap=True)

    def warning(self, text: str) -> None:
        """``warning: <text>``, the label styled, the text literal (secrets masked)."""
        self.console.print(Text.assemble(self.prefix, ("warning:", "yellow"), " ", mask_secrets(text)), soft_wrap=True)

    def update(self, step: int, metrics: Mapping[str, float], failure: str | None = None) -> None:
        """Show a finished step (``failure``: its batch's first failed episode, for the no-signal warning)."""
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
        left = self.eta.update(step, metrics.get("perf/step_s"))
        eta = "eta -" if left is None else f"eta {format_duration(left)}"
        if self._progress is not None:
            self._progress.update(self._task, completed=step, info=info, eta=eta)
        elif step % 10 == 0 or "eval/accuracy" in metrics or step == self.total:
            self.console.print(f"{self.prefix}step {step}/{self.total}  {info}  {eta}", markup=False, highlight=False)
        warning = self.signal.add(step, metrics, failure)
        if warning:
            self.warning(warning)
        skipped = metrics.get("optim/skipped_updates", 0.0)
        if skipped and not self._said_skipped_updates:  # once: a run of them would flood the console
            self._said_skipped_updates = True
            self.warning(skipped_updates_note(step, skipped))

    def summarize(self, lines: list[str]) -> None:
        """Close the no-signal window (a warning comes before the summary), then print ``lines``."""
        self._flush_signal()
        for line in lines:
            self.message(line)

    def close(self) -> None:
        self._flush_signal()
        if self._progress is not None and self.board is None:  # a board is closed by its owner
            self._progress.stop()

    def _flush_signal(self) -> None:
        warning = self.signal.flush()
        if warning:
            self.warning(warning)


def skipped_updates_note(step: int, skipped: float) -> str:
    """The one line that says the learner dropped non-finite updates (said once per run)."""
    updates = "update" if skipped == 1 else "updates"
    return (f"step {step}: the learner skipped {skipped:g} {updates}: the loss or its gradient was not finite "
            f"(NaN or inf), so the weights were left as they were; later skips are counted in "
            f"optim/skipped_updates (metrics.jsonl), not shown")


def time_limit_note(limit_s: float, steps: int, total: int, checkpoint: Path | None,
                    cut_short: Sequence[str] = ()) -> str:
    """The line that says a time limit, not ``train.total_steps``, ended a run, and what it cut
    short (``"evaluation"``, ``"generation"``: abandoned when the time ran out)."""
    saved = f"checkpoint {checkpoint}" if checkpoint is not None else "no checkpoint (checkpoint.save_final = false)"
    cut = f" ({' and '.join(cut_short)} in progress abandoned)" if cut_short else ""
    return f"time limit reached (train.max_runtime_s = {limit_s:g}) after {steps} of {total} steps{cut}; {saved}"


def final_summary(run_dir: Path, steps: int, stop_reason: str, eval_accuracy: float | None,
                  checkpoint: Path | None) -> list[str]:
    """The closing lines of a completed run: what happened, where it is, what to run next."""
    acc = "" if eval_accuracy is None else f"; eval/accuracy {eval_accuracy:.3f}"
    return [
        f"done after {steps} steps ({stop_reason}){acc}",
        f"run directory: {run_dir}",
        f"last checkpoint: {checkpoint if checkpoint is not None else 'none (checkpoint.save_final = false)'}",
        f"report: grpo-run report {shlex.quote(str(run_dir))}",
    ]
