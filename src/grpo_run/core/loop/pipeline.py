"""The live state of the loop's stages, for the live pipeline page (``grpo-run serve``).

The loop tells a :class:`PipelineMonitor` when a batch starts, moves between stages
(generating -> scoring -> ready -> training) and is done, and when the engine takes new weights;
the monitor rewrites ``<run_dir>/pipeline.json`` atomically on every change, so any reader of
the run directory sees the queue depths, the batches in flight with their staleness, the
latest throughput and where each verifier runs -- without talking to the training process.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from grpo_run.core.loop.observers import StepEvent

PIPELINE_FILE = "pipeline.json"
PHASES = ("generating", "scoring", "ready", "training")
"""Stages a batch passes through, in order."""

LIVE_METRICS = (
    "reward/mean", "eval/accuracy", "perf/generation_tokens_per_s", "perf/learner_tokens_per_s",
    "perf/step_s", "perf/generation_s", "perf/scoring_tail_s", "perf/learner_s", "perf/sync_s",
    "rollout/staleness_mean", "rollout/staleness_max", "rollout/real_batch_size_ratio",
)
"""Metrics of the newest step shown on the page."""


class PipelineListener(Protocol):
    """What the loop tells about its batches (see :class:`PipelineMonitor`)."""

    def batch_started(self, index: int, policy_version: int) -> None: ...

    def batch_phase(self, index: int, phase: str) -> None: ...

    def batch_done(self, index: int) -> None: ...

    def weights_published(self, version: int) -> None: ...

    def engine_synced(self, version: int) -> None: ...

    def engine_syncing(self, version: int) -> None: ...

    def evaluating(self, running: bool) -> None: ...


class NoPipeline:
    """A listener that ignores everything (tests, loops without a run directory)."""

    def batch_started(self, index: int, policy_version: int) -> None:
        pass

    def batch_phase(self, index: int, phase: str) -> None:
        pass

    def batch_done(self, index: int) -> None:
        pass

    def weights_published(self, version: int) -> None:
        pass

    def engine_synced(self, version: int) -> None:
        pass

    def engine_syncing(self, version: int) -> None:
        pass

    def evaluating(self, running: bool) -> None:
        pass


class PipelineMonitor:
    """Keeps the stages' state and writes it to ``pipeline.json``; also an observer of steps.

    All calls come from the loop's event-loop thread, so no locking is needed.
    """

    def __init__(self, run_dir: Path, total_steps: int, async_steps: int, start_step: int = 0,
                 clock: Callable[[], float] = time.time, scoring: list[dict[str, Any]] | None = None) -> None:
        self.path = Path(run_dir) / PIPELINE_FILE
        self.scoring = list(scoring or [])
        """Where the verifiers run: ``{"verifiers": [...], "where": ..., ...}`` per pool of workers,
        Ray actors or the training process (``RewardScorer.placement``)."""
        self.clock = clock
        self.total_steps = total_steps
        self.async_steps = async_steps
        self.status = "running"
        self.started = clock()
        self.learner_version = start_step
        self.engine_version = start_step
        self.batches: dict[int, dict[str, Any]] = {}
        self.last_metrics: dict[str, float] = {}
        self.last_step_at: float | None = None
        self.evaluation_running = False
        self.evaluation_since = self.started
        self.syncing: tuple[int, float] | None = None
        """(step, since) of a weight sync in progress."""
        self.last_change = self.started
        """When anything above last changed (what :mod:`.waiting` measures quiet from)."""
        self.write()

    # -- the loop's calls -------------------------------------------------------------------

    def batch_started(self, index: int, policy_version: int) -> None:
        self.batches[index] = {"phase": "generating", "policy_version": policy_version, "since": self.clock()}
        self.write()

    def batch_phase(self, index: int, phase: str) -> None:
        """Move a batch to ``phase``. Generating and scoring may alternate (active sampling draws
        more rounds); once ready, a batch only moves on (callbacks may arrive late)."""
        batch = self.batches.get(index)
        if batch is None or batch["phase"] == phase:
            return
        if batch["phase"] in ("ready", "training") and PHASES.index(phase) < PHASES.index(batch["phase"]):
            return
        batch["phase"] = phase
        batch["since"] = self.clock()
        self.write()

    def batch_done(self, index: int) -> None:
        if self.batches.pop(index, None) is not None:
            self.write()

    def weights_published(self, version: int) -> None:
        """The learner finished step ``version`` (before that step's evaluation and observers)."""
        self.learner_version = max(self.learner_version, version)
        self.write()

    def engine_synced(self, version: int) -> None:
        self.engine_version = version
        self.syncing = None
        self.write()

    def engine_syncing(self, version: int) -> None:
        """The engine starts loading the weights of step ``version``."""
        self.syncing = (version, self.clock())
        self.write()

    def evaluating(self, running: bool) -> None:
        """An evaluation started or ended (the learner waits for it)."""
        self.evaluation_running = running
        self.evaluation_since = self.clock()
        self.write()

    # -- observer ---------------------------------------------------------------------------

    def on_step(self, event: StepEvent) -> None:
        self.learner_version = max(self.learner_version, event.step)
        for key in LIVE_METRICS:
            if key in event.metrics and math.isfinite(float(event.metrics[key])):
                self.last_metrics[key] = float(event.metrics[key])
        self.last_step_at = self.clock()
        self.write()

    def on_run_end(self, status: str, error: BaseException | None) -> None:
        self.status = status
        self.batches.clear()
        self.evaluation_running = False
        self.write()

    # -- output -----------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        now = self.clock()
        stages = dict.fromkeys(PHASES, 0)
        batches = []
        for index, b in sorted(self.batches.items()):
            stages[b["phase"]] += 1
            batches.append({"index": index, "phase": b["phase"], "policy_version": b["policy_version"],
                            "staleness": self.learner_version - b["policy_version"],
                            "in_phase_s": round(now - b["since"], 3)})
        return {
            "status": self.status, "updated": now, "started": self.started,
            "step": self.learner_version, "total_steps": self.total_steps, "async_steps": self.async_steps,
            "engine_version": self.engine_version, "evaluating": self.evaluation_running,
            "evaluating_s": round(now - self.evaluation_since, 3),
            "syncing": self.syncing[0] if self.syncing else None,
            "syncing_s": round(now - self.syncing[1], 3) if self.syncing else 0.0,
            "stages": stages, "batches": batches,
            "last_metrics": dict(self.last_metrics), "last_step_at": self.last_step_at,
            "scoring": self.scoring,
        }

    def write(self) -> None:
        """Rewrite ``pipeline.json``. It only feeds the live page: a file system that refuses it
        (full, read-only) skips it, leaving no temporary file; the run's own writes report that."""
        self.last_change = self.clock()
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        try:
            tmp.write_text(json.dumps(self.snapshot()), encoding="utf-8")
            os.replace(tmp, self.path)  # the page never reads half a file
        except OSError:
            tmp.unlink(missing_ok=True)


def read_pipeline(run_dir: Path) -> Mapping[str, Any] | None:
    """The newest ``pipeline.json`` of a run directory, or None when there is none (yet)."""
    try:
        return json.loads((Path(run_dir) / PIPELINE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
