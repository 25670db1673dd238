"""SIGINT (Ctrl-C) and SIGTERM during a run: the first stops it safely, a second exits at once.

What a first signal does depends on where the run is:

* building (data, model, engine): there is nothing to save, so :class:`StopRequested` is raised
  at once in the main thread (like ``KeyboardInterrupt``, but never caught by library code that
  catches ``Exception``);
* in the training loop: the loop is asked to stop (``request_stop`` on its event loop): batches
  being generated or scored are abandoned, a learner step already running is finished, and the
  run saves a checkpoint that resumes exactly (see :mod:`grpo_run.core.loop.run`);
* finishing (final checkpoint, closing): the run is ending anyway and ends normally.

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
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

HANDLED = (signal.SIGINT, signal.SIGTERM)
EXIT_CODES = {"SIGINT": 130, "SIGTERM": 143}
"""Exit codes of a run stopped by a signal: 128 + the signal's number, as shells report it."""


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

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in HANDLED:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def looping(self, loop: asyncio.AbstractEventLoop, request_stop: Callable[[str], Any]) -> None:
        """The training loop runs on ``loop``: a first signal calls ``request_stop(name)`` there."""
        self._building = False
        self._loop, self._request_stop = loop, request_stop
        if self.received is not None:  # arrived between building and now
            loop.call_soon(request_stop, self.received)

    def finishing(self) -> None:
        """The loop is over: a first signal no longer changes anything."""
        self._building = False
        self._loop = self._request_stop = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.received is not None:
            self._exit_now(name)
        self.received = name
        again = "press Ctrl-C again" if name == "SIGINT" else f"send {name} again"
        self.notice(f"{name} received: stopping safely and saving a checkpoint ({again} to exit at once)")
        if self._loop is not None and self._request_stop is not None:
            self._loop.call_soon_threadsafe(self._request_stop, name)
        elif self._building:
            raise StopRequested(name)

    def _exit_now(self, name: str) -> None:
        """Second signal: take the child processes along and leave without cleaning up."""
        kill_child_processes()
        self.notice(f"{name} again: exiting at once without saving")
        os._exit(EXIT_CODES.get(name, 130))


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
        os.write(2, (text + "\n").encode("utf-8", "replace"))
    except OSError:
        pass
