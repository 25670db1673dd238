"""SIGINT (Ctrl-C) and SIGTERM during a run: the first stops it safely, a second exits at once.

What a first signal does depends on where the run is:

* building (data, model, engine): there is nothing to save, so :class:`StopRequested` is raised
  at once in the main thread (like ``KeyboardInterrupt``, but never caught by library code that
  catches ``Exception``);
* in the training loop: the loop is asked to stop (``request_stop`` on its event loop): batches
  being generated or scored are abandoned, a learner step already running is finished, and the
  run saves a checkpoint that resumes exactly (see :mod:`grpo_run.core.loop.run`);
* finishing (final checkpoint, closing): the run is ending anyway and ends normally.

A stop requested on the event loop waits for the loop to take it. Code that holds the loop
without awaiting (``time.sleep`` or a synchronous HTTP client inside an environment's ``async
def``) would keep the request queued for good, and only a second signal would end the run, saving
nothing. So a first signal also starts a thread: when the loop has not taken the request within
:data:`STUCK_GRACE_S` while known code holds it (``held_by``), that thread calls ``on_stuck``
(which saves what can be saved safely and says what it could not), prints where the run stands,
takes the child processes along and exits with :data:`EXIT_CODES`. The same thread does so when
the loop took the request but is still stopping :data:`SLOW_STOP_S` later with no learner step
running: unwinding thousands of an agent's requests kept a first Ctrl-C from ending a run for
minutes, and a second one saved nothing.

Without any signal, code that holds the loop for ``train.max_loop_hold_s`` stops the run the same
way (``on_held_too_long``), exiting with 1: it cannot be cancelled, and nothing else runs meanwhile.
So does code that holds it again and again, each time for less, while the holds of one training
step add up to the limit (``held_in_step``).

A second signal kills this process's child processes (scoring workers, engine servers) and exits
at once with :data:`EXIT_CODES` without saving; the previous checkpoint is untouched (a
checkpoint is renamed into place only once complete).

Handlers are installed only in the main thread (Python's rule); elsewhere a run keeps Python's
defaults. Hand-written on purpose: what the signal means depends on the run's phase, which no
library knows.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from grpo_run.core.rollout.env_exit import real_exit

HANDLED = (signal.SIGINT, signal.SIGTERM)
EXIT_CODES = {"SIGINT": 130, "SIGTERM": 143}
"""Exit codes of a run stopped by a signal: 128 + the signal's number, as shells report it."""
STUCK_GRACE_S = 2.0
"""How long a first signal waits for a held event loop to take the stop request."""
SLOW_STOP_S = 10.0
"""How long a first signal waits for a loop that took the stop request to finish stopping, while
no learner step runs, before it stops the run from outside the loop."""


class StopRequested(BaseException):
    """A stop signal arrived while no training loop was running (the run was being built)."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name


class RunInterrupted(Exception):
    """A run stopped by a signal, after saving what it could. The CLI prints where the run stands
    and how to go on, and exits with :attr:`exit_code`."""

    def __init__(self, signal_name: str, step: int, checkpoint: Path | None, run_dir: Path) -> None:
        super().__init__(f"interrupted by {signal_name} at step {step}")
        self.signal_name = signal_name
        self.step = step
        """Learner steps completed."""
        self.checkpoint = checkpoint
        """The checkpoint to resume from (just saved, or the one the run resumed from); None
        when no step was ever completed."""
        self.run_dir = run_dir

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(self.signal_name, 130)


class StopSignals:
    """Installs the run's SIGINT/SIGTERM handlers for the ``with`` block (main thread only).

    ``notice(text)`` shows a line to the person at the terminal; it is called from the signal
    handler, so it must not block (the default writes straight to stderr's file descriptor).
    """

    def __init__(self, notice: Callable[[str], None] | None = None) -> None:
        self.notice = notice or _write_stderr
        self.received: str | None = None
        """Name of the first stop signal, once one arrived."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._request_stop: Callable[[str], Any] | None = None
        self._building = True
        self._previous: dict[int, Any] = {}
        self._taken = threading.Event()
        self._held_by: Callable[[], tuple[str, float] | None] | None = None
        self._on_stuck: Callable[[str, str, bool], list[str]] | None = None
        self._on_held_too_long: Callable[[str, bool], list[str]] | None = None
        self._held_in_step: Callable[[tuple[str, float] | None], tuple[str, float] | None] | None = None
        self._outside = threading.Lock()
        """Held by the one thread that stops the run from outside the loop (a signal's, or the hold limit's)."""

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in HANDLED:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def looping(self, loop: asyncio.AbstractEventLoop, request_stop: Callable[[str], Any], *,
                held_by: Callable[[], tuple[str, float] | None] | None = None,
                on_stuck: Callable[[str, str, bool], list[str]] | None = None, hold_limit_s: float = 0.0,
                on_held_too_long: Callable[[str, bool], list[str]] | None = None,
                held_in_step: Callable[[tuple[str, float] | None], tuple[str, float] | None] | None = None) -> None:
        """The training loop runs on ``loop``: a first signal calls ``request_stop(name)`` there.

        ``held_by()``: what holds the loop right now and for how long (None: nothing known).
        ``on_stuck(signal_name, what, held)``: called on another thread when the loop stays held
        after a first signal (``held``), or is slow to stop; saves what it safely can and returns
        the lines to print before exiting (none: wait on).
        ``on_held_too_long(holder, in_total)``: the same when known code has held the loop for
        ``hold_limit_s`` (0: never), without a signal -- at once, or (``in_total``) in all its holds
        of the training step, ``held_in_step(now)`` saying what held it and for how long, the hold
        ``now`` going on included; the process then exits with 1. It returns no lines when the
        loop is free again (the run goes on)."""
        self._building = False
        self._loop, self._request_stop = loop, request_stop
        self._held_by, self._on_stuck = held_by, on_stuck
        self._on_held_too_long, self._held_in_step = on_held_too_long, held_in_step
        if held_by is not None and on_held_too_long is not None and hold_limit_s > 0:
            threading.Thread(target=self._watch_hold_limit, args=(hold_limit_s,), name="grpo-run-hold-limit",
                             daemon=True).start()
        if self.received is not None:  # arrived between building and now
            loop.call_soon(self._take, self.received)

    def finishing(self) -> None:
        """The loop is over: a first signal no longer changes anything."""
        self._building = False
        self._loop = self._request_stop = None
        self._held_by = self._on_stuck = self._on_held_too_long = None

    def _take(self, name: str) -> None:
        """On the loop's thread: the loop took the stop request."""
        self._taken.set()
        if self._request_stop is not None:
            self._request_stop(name)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.received is not None:
            self._exit_now(name)
        self.received = name
        again = "press Ctrl-C again" if name == "SIGINT" else f"send {name} again"
        self.notice(f"{name} received: stopping safely and saving a checkpoint ({again} to exit at once)")
        if self._loop is not None and self._request_stop is not None:
            self._loop.call_soon_threadsafe(self._take, name)
            if self._held_by is not None and self._on_stuck is not None:
                threading.Thread(target=self._watch_held_loop, args=(name,), name="grpo-run-stop-watch",
                                 daemon=True).start()
        elif self._building:
            raise StopRequested(name)

    def _watch_held_loop(self, name: str) -> None:
        """A first signal's request waits on the loop; when known code keeps holding the loop, or
        the loop took the request but is still stopping :data:`SLOW_STOP_S` later with no learner
        step running (a flood of an agent's requests to unwind), stop from this thread instead
        (saving what :attr:`_on_stuck` can)."""
        since = time.monotonic()
        while True:
            time.sleep(0.1)
            held_by, on_stuck = self._held_by, self._on_stuck
            if held_by is None or on_stuck is None:
                return  # the loop is over: the run is finishing normally
            waited = time.monotonic() - since
            held = held_by() if not self._taken.is_set() else None
            if held is not None and waited >= STUCK_GRACE_S:
                what = f"{held[0]} has held the event loop for {held[1]:.0f} s"
            elif self._taken.is_set() and waited >= SLOW_STOP_S:
                what = f"the run is still stopping {waited:.0f} s after it (its event loop is busy)"
            else:
                continue
            if not self._outside.acquire(blocking=False):
                return  # the hold limit is stopping the run already
            try:
                lines = on_stuck(name, what, held is not None)
            except BaseException as exc:  # noqa: BLE001 - exiting anyway; the previous checkpoint stands
                lines = [f"could not save ({type(exc).__name__}: {exc}); the previous checkpoint is intact"]
            if not lines or (held is not None and self._taken.is_set()):
                self._outside.release()
                continue  # the loop woke up and stops on its own, or a learner step is still to finish
            self.notice(f"{name}: {what}; stopping from outside the loop")
            self._exit_with(lines, EXIT_CODES.get(name, 130))

    def _watch_hold_limit(self, limit_s: float) -> None:
        """Stop the run when known code has held the loop for ``limit_s`` (it cannot be cancelled:
        nothing else runs until it returns, which may be never)."""
        while True:
            time.sleep(0.25)
            held_by, on_held = self._held_by, self._on_held_too_long
            if held_by is None or on_held is None:
                return  # the loop is over
            held = held_by()
            if held is None or self.received is not None:
                continue  # a signal's own stop handles a held loop after a first signal
            in_step = self._held_in_step(held) if self._held_in_step is not None else None
            if held[1] >= limit_s:
                holder, in_total = held[0], False
            elif in_step is not None and in_step[1] >= limit_s:
                holder, in_total = in_step[0], True
            else:
                continue
            if not self._outside.acquire(blocking=False):
                return
            try:
                lines = on_held(holder, in_total)
            except BaseException as exc:  # noqa: BLE001 - exiting anyway; the previous checkpoint stands
                lines = [f"run stopped: {holder} held the event loop past its limit, and saving failed "
                         f"({type(exc).__name__}: {exc}); the previous checkpoint is intact"]
            if not lines:  # the loop is free again: the run goes on
                self._outside.release()
                continue
            self._exit_with(lines, 1)

    def _exit_with(self, lines: list[str], code: int) -> None:
        for line in lines:
            self.notice(line)
        kill_child_processes()
        real_exit(code)

    def _exit_now(self, name: str) -> None:
        """Second signal: take the child processes along and leave without cleaning up."""
        kill_child_processes()
        self.notice(f"{name} again: exiting at once without saving")
        real_exit(EXIT_CODES.get(name, 130))


def kill_child_processes() -> None:
    """SIGKILL every process this one started (directly or not): none may outlive the run."""
    import psutil

    try:
        children = psutil.Process().children(recursive=True)
    except psutil.Error:
        return
    for child in children:
        try:
            child.kill()
        except psutil.Error:
            pass


def _write_stderr(text: str) -> None:
    try:
        sys.stderr.flush()
        fd = sys.stderr.fileno()  # the console's, while file descriptor 2 goes elsewhere (ray_join.py)
    except (AttributeError, OSError, ValueError):
        fd = 2
    try:
        os.write(fd, (text + "\n").encode("utf-8", "replace"))
    except OSError:
        pass
