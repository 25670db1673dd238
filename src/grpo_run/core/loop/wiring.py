"""The training loop of a built run, wired to what watches it: observers (metrics, trackers,
console, checkpoints, traces, the pipeline page), the stop signals, the report of what a quiet
loop waits for and what to do when code holds the event loop (:class:`LoopRig`)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from grpo_run.core.loop.build import RunParts, loop_settings
from grpo_run.core.loop.checkpoint import prune_checkpoints, rng_state, save_checkpoint
from grpo_run.core.loop.held_loop import HoldTally, loop_holder, stop_held_loop, stop_held_too_long
from grpo_run.core.loop.observers import Checkpointer, ConsoleProgress, MetricsFile, TrackerFanout
from grpo_run.core.loop.opening import OpenedRun
from grpo_run.core.loop.pipeline import PipelineMonitor
from grpo_run.core.loop.progress import final_summary, time_limit_note
from grpo_run.core.loop.rundir import checkpoints_dir
from grpo_run.core.loop.loop_types import LoopState
from grpo_run.core.loop.scheduler import TrainingLoop
from grpo_run.core.loop.signals import RunInterrupted, StopSignals
from grpo_run.core.loop.traces import RolloutTraces
from grpo_run.core.loop.waiting import WaitReporter
from grpo_run.core.placement.learner_group import InProcessLearner
from grpo_run.core.runlog import get_logger


class LoopRig:
    """A built run's :class:`TrainingLoop` with its observers (listed on ``run.observers`` for
    :meth:`OpenedRun.close`), checkpoints, wait reports and held-loop handling."""

    def __init__(self, parts: RunParts, run: OpenedRun,
                 report_interrupted: Callable[[RunInterrupted], list[str]] | None) -> None:
        cfg = parts.cfg
        self.parts, self.run, self.report_interrupted = parts, run, report_interrupted
        self._save_lock, self._saved_steps = threading.Lock(), set[int]()
        self.checkpointer = Checkpointer(self._save, cfg.checkpoint.save_freq, cfg.checkpoint.save_final)
        trackers = TrackerFanout(parts.trackers, warn=run.progress.warning)
        pipeline = PipelineMonitor(run.run_dir, cfg.train.total_steps, cfg.rollout.async_steps, run.start_step,
                                   scoring=parts.scorer.placement())
        parts.producer.phase_listener = pipeline.batch_phase
        self.holds = HoldTally(run.start_step)
        """Every hold of the event loop in the current step (``train.max_loop_hold_s`` bounds their total)."""
        run.observers = [self.checkpointer, MetricsFile(run.run_dir), trackers, run.hooks,
                         ConsoleProgress(run.progress), run.last, pipeline, self.holds]
        if parts.traces is not None:
            parts.traces.on_sink_error = trackers.failed
            run.observers.insert(2, RolloutTraces(parts.traces))
        self.loop = TrainingLoop(parts.loop_parts(), loop_settings(cfg), run.observers, start_step=run.start_step,
                                 pipeline=pipeline)
        episodes = parts.episodes
        self.waits = WaitReporter(pipeline, run.progress.message, cfg.logging.report_waits_s,
                                  also=episodes.describe_waits if episodes is not None else None)
        self.held_by = loop_holder(parts.scorer.loop_held, episodes.monitor.held if episodes is not None else None)
        parts.scorer.count_loop_holds(self.holds.add)
        if episodes is not None:
            episodes.monitor.on_hold = self.holds.add

    def drive(self, signals: StopSignals) -> LoopState:
        """Run the loop to its end; a stop signal reaches it on its event loop."""
        limit_s = self.parts.cfg.train.max_loop_hold_s
        state = asyncio.run(self._drive(signals, held_by=self.held_by, on_stuck=self.stuck, hold_limit_s=limit_s,
                                        on_held_too_long=self.held_too_long, held_in_step=self.holds.total))
        signals.finishing()  # only now: asyncio.run's own end waits for every task left (an agent's)
        return state

    def finish(self, state: LoopState) -> None:
        """Save after the last step; after a stop signal, raise :class:`RunInterrupted` saying where."""
        cfg, run = self.parts.cfg, self.run
        if self.loop.interrupted is not None:
            saved = run.checkpoint
            if state.version > run.start_step:
                self.checkpointer.save_now(state.version, self.loop.resume_rollout_state())
                saved = self._checkpoint_of(state.version)
            raise RunInterrupted(self.loop.interrupted, state.version, saved, run.run_dir)
        if cfg.checkpoint.save_final:  # batches a time limit abandoned are drawn again on resume
            self.checkpointer.save_now(state.version, self.loop.resume_rollout_state())

    def summarize(self, state: LoopState) -> None:
        """The console's last lines: a time limit that cut the run short, and where things are."""
        cfg, progress = self.parts.cfg, self.run.progress
        saved = self.checkpointer.last_saved
        last_saved = self._checkpoint_of(saved) if saved >= 0 else None
        if state.stop_reason.startswith("train.max_runtime_s") and (
                state.version < cfg.train.total_steps or state.cut_short):
            progress.warning(time_limit_note(cfg.train.max_runtime_s, state.version, cfg.train.total_steps,
                                             last_saved, state.cut_short))
        progress.summarize(final_summary(self.run.run_dir, state.version, state.stop_reason,
                                         self.run.last.values.get("eval/accuracy"), last_saved))

    def save_learnt(self) -> None:
        """Keep what was learnt when the run ends without a handler for the signal (not the main
        thread's ``KeyboardInterrupt``)."""
        steps = self.parts.learner.steps
        if steps > self.run.start_step:
            save_step(self.parts, steps, self.loop.resume_rollout_state())

    async def _drive(self, signals: StopSignals, **looping: Any) -> LoopState:
        """:meth:`looped`, a stop signal reaching it on its event loop. ``looping``: the options
        of :meth:`StopSignals.looping`."""
        signals.looping(asyncio.get_running_loop(), self.loop.request_stop, **looping)
        return await self.looped()

    async def looped(self) -> LoopState:
        """The loop and the report of what a quiet loop waits for; async verifiers close on the
        event loop they used. (A sweep runs its variants' this way, side by side.)"""
        reporting = asyncio.create_task(self.waits.run(), name="wait-reporter")
        try:
            return await self.loop.run()
        finally:
            reporting.cancel()
            await self.parts.scorer.aclose()

    def _save(self, step: int, rollout_state: Mapping[str, Any] | None) -> None:
        # The loop's thread saves, and a stop signal on a held loop may (held_loop.py): one at a
        # time, each step once.
        with self._save_lock:
            if step in self._saved_steps:
                return
            dest = save_step(self.parts, step, rollout_state, self.loop.batches_in_flight())
            self._saved_steps.add(step)
        if self.run.pusher is not None:
            self.run.pusher.saved(dest, step)

    def _checkpoint_of(self, step: int) -> Path:
        return checkpoints_dir(self.parts.cfg, self.run.run_dir) / f"step_{step}"

    def stuck(self, signal_name: str, holder: str, held: bool) -> list[str]:
        """A first signal found the event loop held: save what is safe (:func:`stop_held_loop`)."""
        run = self.run
        return stop_held_loop(signal_name, holder, self.loop, self.checkpointer, self.held_by, run.start_step,
                              run.checkpoint, self._checkpoint_of, run.run_dir, run.log_file,
                              self.report_interrupted, held)

    def held_too_long(self, holder: str, in_total: bool) -> list[str]:
        """Code held the event loop past ``train.max_loop_hold_s``: save what is safe (:func:`stop_held_too_long`)."""
        run = self.run
        return stop_held_too_long(holder, self.parts.cfg.train.max_loop_hold_s, self.loop, self.checkpointer,
                                  self.held_by, run.start_step, run.checkpoint, self._checkpoint_of, run.run_dir,
                                  run.log_file, self.report_interrupted, in_total)


def save_step(parts: RunParts, step: int, rollout_state: Mapping[str, Any] | None = None,
              in_flight: list[int] | None = None) -> Path:
    """Checkpoint after ``step``. ``rollout_state`` (from the loop): the sampler's (and engine's)
    state from before batch ``step + 1`` was drawn, when drawing it has already begun.
    ``in_flight``: batches drawn before the save and not trained (drawn again after a resume)."""
    directory = checkpoints_dir(parts.cfg, parts.run_dir)
    dest = directory / f"step_{step}"
    rollout_state = dict(rollout_state) if rollout_state is not None else parts.producer.rollout_state()
    save_checkpoint(
        dest,
        parts.learner,  # writes the full policy (gathered) and the strategy's own files
        parts.tokenizer,
        trainer_state={
            "learner": parts.learner.state_dict(),
            **rollout_state,
            "rng": rng_state(),
            "step": step,
            "in_flight": list(in_flight or []),
        },
        info={"step": step, "model": parts.cfg.model.name_or_path},
        write_extra=parts.learner.extra_writer() if isinstance(parts.learner, InProcessLearner) else None,
    )
    pruned = prune_checkpoints(directory, parts.cfg.checkpoint.keep_last_n)
    get_logger().info("checkpoint_saved", step=step, path=str(dest), pruned=pruned)
    return dest
