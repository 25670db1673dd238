"""Observers of a training run: everything that reacts to step events without being a stage.

The loop (:mod:`.scheduler`) only schedules: after each step it hands a :class:`StepEvent` to
every observer, in order. Checkpoints, ``metrics.jsonl``, trackers, the plugins' lifecycle hooks,
the console and the structured log are observers; adding one touches no stage.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from grpo_run.core.loop.fserrors import writing
from grpo_run.core.loop.progress import RunProgress
from grpo_run.core.plugins.contracts import Tracker
from grpo_run.core.plugins.host import PluginHost
from grpo_run.core.runlog import get_logger

if TYPE_CHECKING:  # annotations only: the CLI's report and serve read run files without torch
    from grpo_run.core.rollout.sequences import GroupSignal, RolloutBatch

METRICS_FILE = "metrics.jsonl"


@attrs.frozen
class StepEvent:
    """A finished learner step (step 0: the evaluation before training)."""

    step: int
    metrics: Mapping[str, float]
    rollout_state: Mapping[str, Any] | None = None
    """The sampler (and engine) state from before batch ``step + 1`` was drawn, when the loop
    snapshotted it; what a checkpoint after this step must hold for an exact resume."""
    batch: RolloutBatch | None = None
    """The rollout batch this step trained on (None for step 0)."""
    signal: GroupSignal | None = None
    """Its completions' advantages and which groups were kept (None without groups)."""


class Observer(Protocol):
    """Reacts to a run's events; every method is optional in spirit (define it empty)."""

    def on_step(self, event: StepEvent) -> None: ...

    def on_run_end(self, status: str, error: BaseException | None) -> None: ...


class MetricsFile:
    """``<run_dir>/metrics.jsonl``: one ``{"step": n, **metrics}`` object per step, written
    unbuffered so nothing is lost. Part of the run directory's format, always written."""

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / METRICS_FILE
        with writing(self.path, "the metrics file"):
            self._fh = self.path.open("ab", buffering=0)  # unbuffered: each line is on disk, or cut off

    def on_step(self, event: StepEvent) -> None:
        record: dict[str, Any] = {"step": event.step}
        for key, value in event.metrics.items():
            value = float(value)
            record[key] = value if math.isfinite(value) else None  # JSON has no NaN
        line = memoryview((json.dumps(record) + "\n").encode("utf-8"))
        end = os.fstat(self._fh.fileno()).st_size
        try:
            with writing(self.path, "the metrics file"):
                while line:
                    line = line[self._fh.write(line):]
        except BaseException:
            try:
                os.truncate(self.path, end)  # a refused write leaves no half line
            except OSError:
                pass
            raise

    def on_run_end(self, status: str, error: BaseException | None) -> None:
        self._fh.close()


class TrackerFanout:
    """Hands every step's metrics to the enabled tracker plugins. A tracker that fails is logged
    (and its first failure shown through ``warn``), never fatal: a dashboard that is down must
    not stop training."""

    def __init__(self, trackers: Sequence[Tracker], warn: Callable[[str], None] | None = None) -> None:
        self.trackers = list(trackers)
        self.warn = warn
        self.failures: dict[str, int] = {}

    def on_step(self, event: StepEvent) -> None:
        for tracker in self.trackers:
            try:
                tracker.log(event.step, event.metrics)
            except Exception as exc:
                self.failed(tracker, exc)

    def failed(self, tracker: Tracker, exc: Exception) -> None:
        """Count, log and (the first time) show a tracker's failure."""
        name = tracker.name
        error = f"{type(exc).__name__}: {exc}"
        self.failures[name] = self.failures.get(name, 0) + 1
        get_logger().warning("tracker_failed", tracker=name, error=error)
        if self.failures[name] == 1 and self.warn is not None:
            self.warn(f"tracker {name!r} failed ({error}); training goes on, later failures are only logged")

    def on_run_end(self, status: str, error: BaseException | None) -> None:
        for tracker in self.trackers:
            try:
                tracker.close()
            except Exception as exc:  # shutting down: report, keep closing the rest
                get_logger().warning("tracker_close_failed", error=f"{type(exc).__name__}: {exc}")


class LifecycleHooks:
    """Calls the plugins' ``grpo_run_step_end`` hook; a failing plugin is logged and shown, never raised."""

    def __init__(self, host: PluginHost, progress: RunProgress) -> None:
        self.host = host
        self.progress = progress

    def notify(self, hook: str, **kwargs: object) -> None:
        for failure in self.host.notify(hook, **kwargs):
            get_logger().warning("plugin_hook_failed", detail=failure)
            self.progress.warning(failure)

    def on_step(self, event: StepEvent) -> None:
        self.notify("grpo_run_step_end", step=event.step, metrics=event.metrics)

    def on_run_end(self, status: str, error: BaseException | None) -> None:
        pass  # grpo_run_run_end is sent by the run itself, after the final checkpoint


class ConsoleProgress:
    """The progress display and the structured log line of each step."""

    def __init__(self, progress: RunProgress) -> None:
        self.progress = progress

    def on_step(self, event: StepEvent) -> None:
        self.progress.update(event.step, event.metrics, event.batch.failure if event.batch is not None else None)
        if event.step == 0 and "eval/accuracy" in event.metrics:
            self.progress.message(f"starting eval/accuracy {event.metrics['eval/accuracy']:.3f}")
        get_logger().info("step", step=event.step, **{k: float(v) for k, v in event.metrics.items()})

    def on_run_end(self, status: str, error: BaseException | None) -> None:
        self.progress.close()


class Checkpointer:
    """Saves a checkpoint every ``save_freq`` steps (``save``: ``(step, rollout_state)``), and at
    the end of a completed run when ``save_final`` and the last step was not saved already."""

    def __init__(self, save: Callable[[int, Mapping[str, Any] | None], None], save_freq: int, save_final: bool) -> None:
        self.save = save
        self.save_freq = save_freq
        self.save_final = save_final
        self.last_step = -1
        self.last_saved = -1

    def on_step(self, event: StepEvent) -> None:
        self.last_step = event.step
        if event.step > 0 and self.save_freq and event.step % self.save_freq == 0:
            self.save(event.step, event.rollout_state)
            self.last_saved = event.step

    def on_run_end(self, status: str, error: BaseException | None) -> None:
        pass  # the final save needs the run's own decision (completed vs interrupted): see run.py

    def save_now(self, step: int, rollout_state: Mapping[str, Any] | None = None) -> None:
        """Save after ``step`` unless that was just saved (``rollout_state`` as in :class:`StepEvent`)."""
        if step != self.last_saved:
            self.save(step, rollout_state)
            self.last_saved = step


def emit(observers: Sequence[Observer], event: StepEvent) -> None:
    """Hand ``event`` to every observer, in order."""
    for observer in observers:
        observer.on_step(event)


def close_all(observers: Sequence[Observer], status: str, error: BaseException | None) -> None:
    """Tell every observer the run ended; one that fails is logged and the rest still run."""
    for observer in observers:
        try:
            observer.on_run_end(status, error)
        except Exception as exc:  # shutting down: report, keep closing the rest
            get_logger().warning("observer_close_failed", observer=type(observer).__name__,
                                 error=f"{type(exc).__name__}: {exc}")
