"""Saving what can be saved when a stop signal finds the event loop held by blocking code.

An environment's ``async def`` that calls something blocking holds the event loop: the stop
request of a first SIGINT/SIGTERM waits behind it, possibly for good (a synchronous HTTP call to
the run's own agent endpoint never returns). :mod:`.signals` then calls :func:`save_on_held_loop`
from its own thread. It saves the checkpoint of the last finished step only when that is
certainly consistent:

* the learner is idle: no batch is in its learner step (:attr:`TrainingLoop.learner_busy`; one
  running on a worker thread, or finished but not yet published by the held loop, would make the
  weights and the step count disagree), and a learner step cannot start meanwhile
  (:attr:`TrainingLoop.learner_held`);
* the loop is still held by the same code after that flag is set (had it woken up, it stops and
  saves on its own, as after any first signal).

A checkpoint is written into a temporary directory and renamed into place when complete (see
:func:`~grpo_run.core.loop.checkpoint.save_checkpoint`), and the run's ``save`` holds a lock and
saves a step once, so a save from here and one from the loop never interleave. Otherwise nothing is written and the
previous checkpoint stands, as the returned note says.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from grpo_run.core.loop.observers import Checkpointer, StepEvent
from grpo_run.core.loop.signals import RunInterrupted
from grpo_run.core.runlog import get_logger


@attrs.frozen
class HeldLoopSave:
    step: int
    """Learner steps completed."""
    checkpoint: Path | None
    """The checkpoint to resume from (just saved, or an earlier one); None when there is none."""
    note: str | None
    """What could not be saved, and why (None: the last finished step is saved)."""


def save_on_held_loop(
    loop: Any,
    checkpointer: Checkpointer,
    held_by: Callable[[], tuple[str, float] | None],
    checkpoint_of: Callable[[int], Path],
    start: tuple[int, Path | None],
    held: bool = True,
) -> HeldLoopSave | None:
    """Save the last finished step if that is safe (see the module docstring). ``loop``: the
    :class:`~grpo_run.core.loop.scheduler.TrainingLoop`; ``checkpoint_of(step)``: its directory;
    ``start``: the step the run started at and the checkpoint it resumed from. None when the
    loop is no longer held (it stops and saves on its own). ``held = False``: the loop is not
    held but slow to stop after it took a stop request (so no learner step can start): None
    while a learner step runs (it finishes, and saves, first)."""
    loop.learner_held = True
    if held and held_by() is None:
        return None
    start_step, resumed_from = start
    step = loop.state.version
    previous = checkpoint_of(checkpointer.last_saved) if checkpointer.last_saved > start_step else resumed_from
    if loop.learner_busy is not None:
        if not held:
            return None
        return HeldLoopSave(step, previous, f"the learner was in step {loop.learner_busy}, which is not saved")
    if step <= start_step:
        return HeldLoopSave(step, resumed_from, None)
    rollout_state: Mapping[str, Any] | None = loop.resume_rollout_state()
    checkpointer.save_now(step, rollout_state)
    return HeldLoopSave(step, checkpoint_of(step), None)


class HoldTally:
    """How long code held the event loop in the current training step, all holds together.

    ``train.max_loop_hold_s`` bounds one hold; 16 episodes of an agent holding the loop 60 s each
    held a step for 16 minutes, each hold under the limit. The monitors report every hold (a step
    of an environment's or an async verifier's code of :data:`~grpo_run.core.scoring.loop_watchdog.HOLD_S`
    or more: :meth:`add`, on the loop's thread); a finished learner step starts the tally afresh
    (an observer of the loop); :meth:`total` (any thread) adds the hold going on now."""

    def __init__(self, start_step: int) -> None:
        self._lock = threading.Lock()
        self.step = start_step
        """The last finished step: holds since then are counted."""
        self.seconds = 0.0
        self.holds: Counter[str] = Counter()
        self.longest = 0.0

    def add(self, name: str, seconds: float) -> None:
        with self._lock:
            self.seconds += seconds
            self.holds[name] += 1
            self.longest = max(self.longest, seconds)

    def on_step(self, event: StepEvent) -> None:
        with self._lock:
            self.step, self.seconds, self.longest = event.step, 0.0, 0.0
            self.holds.clear()

    def on_run_end(self, status: str, error: BaseException | None) -> None:
        pass

    def total(self, now: tuple[str, float] | None) -> tuple[str, float] | None:
        """(what held the loop, seconds) of the step so far, the hold ``now`` going on included;
        None when nothing has."""
        with self._lock:
            holds, seconds, longest = Counter(self.holds), self.seconds, self.longest
        if now is not None:
            holds[now[0]] += 1
            seconds, longest = seconds + now[1], max(longest, now[1])
        if not holds:
            return None
        who = ", ".join(f"{name} {n}x" for name, n in holds.most_common())
        return (f"code has held the event loop for {seconds:.0f} s in total since step {self.step} ("
                f"{sum(holds.values())} holds, the longest {longest:.0f} s: {who})"), seconds


def loop_holder(*monitors: Callable[[], tuple[str, float] | None] | None
                ) -> Callable[[], tuple[str, float] | None]:
    """What holds the event loop now (an async verifier, an environment call), from any thread."""
    def held_by() -> tuple[str, float] | None:
        for held in monitors:
            found = held() if held is not None else None
            if found is not None:
                return found
        return None
    return held_by


def stop_held_loop(signal_name: str, holder: str, loop: Any, checkpointer: Checkpointer,
                   held_by: Callable[[], tuple[str, float] | None], start_step: int, resumed_from: Path | None,
                   checkpoint_of: Callable[[int], Path], run_dir: Path, log_file: Any,
                   report: Callable[[RunInterrupted], list[str]] | None, held: bool = True) -> list[str]:
    """A first signal found the event loop held (or, ``held = False``, slow to stop): save if safe
    (:func:`save_on_held_loop`); the lines to print before the process exits (``report``: the
    CLI's lines for an interrupted run); none when the run should wait on."""
    log = get_logger()
    saved = save_on_held_loop(loop, checkpointer, held_by, checkpoint_of, (start_step, resumed_from), held)
    if saved is None:
        return []
    lines = [f"not saved: {saved.note}; the previous checkpoint is intact"] if saved.note else []
    exc = RunInterrupted(signal_name, saved.step, saved.checkpoint, run_dir)
    lines += report(exc) if report is not None else [str(exc)]
    log.info("run_interrupted", signal=signal_name, step=saved.step, held_by=holder, not_saved=saved.note,
             checkpoint=str(saved.checkpoint) if saved.checkpoint else None)
    log.info("run_end", status="interrupted")
    log_file.flush()
    return lines


def stop_held_too_long(holder: str, limit_s: float, loop: Any, checkpointer: Checkpointer,
                       held_by: Callable[[], tuple[str, float] | None], start_step: int, resumed_from: Path | None,
                       checkpoint_of: Callable[[int], Path], run_dir: Path, log_file: Any,
                       report: Callable[[RunInterrupted], list[str]] | None, in_total: bool = False) -> list[str]:
    """Code has held the event loop for ``train.max_loop_hold_s`` (``in_total``: all holds of the
    step together, ``holder`` saying so): save if safe (:func:`save_on_held_loop`); the lines to
    print before the process exits with 1 (none: the loop is free again). ``report``: the CLI's
    lines for an interrupted run, the last of which is the command that goes on."""
    log = get_logger()
    if held_by() is None:
        return []
    saved = save_on_held_loop(loop, checkpointer, held_by, checkpoint_of, (start_step, resumed_from))
    if saved is None:  # freed just now: the run goes on
        loop.learner_held = False
        return []
    where = (f"checkpoint {saved.checkpoint}" if saved.checkpoint is not None
             else "nothing to save (no step finished)")
    what = (f"{holder}, more than train.max_loop_hold_s = {limit_s:g} s: nothing else runs while it does"
            if in_total else f"{holder} has held the event loop for more than train.max_loop_hold_s = {limit_s:g} s: "
                             f"nothing else runs until it returns, and it cannot be stopped from outside")
    lines = [f"run stopped: {what} (a blocking call inside `async def`: await an async one, or make it a plain "
             f"def); {where}"]
    if saved.note:
        lines.append(f"not saved: {saved.note}; the previous checkpoint is intact")
    if report is not None:
        lines += report(RunInterrupted("train.max_loop_hold_s", saved.step, saved.checkpoint, run_dir))[-1:]
    log.error("run_failed", error=lines[0], held_by=holder, step=saved.step, not_saved=saved.note,
              checkpoint=str(saved.checkpoint) if saved.checkpoint else None)
    log.info("run_end", status="failed")
    log_file.flush()
    return lines
