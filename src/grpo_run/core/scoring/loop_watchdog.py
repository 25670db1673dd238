"""Watches the event loop for async verifiers and environments that block it.

An ``async def score`` (or an environment's ``async def step`` / ``run_episode``) that calls
something blocking (``time.sleep``, a sync HTTP client) holds the whole event loop: no other
call, no generation, no learner step and no ``asyncio.timeout`` can run until it returns, so the
run stalls without a word. Every step of such a coroutine is wrapped (:class:`Tracked`): it notes
which verifier (or environment call) runs and since when. A daemon thread (:class:`LoopWatchdog`)
looks every :data:`POLL_S` seconds; when one step has run longer than ``warn_after_s`` it warns
naming it -- once per verifier, or (with ``repeat_s``) again every ``repeat_s`` while the same
step still holds the loop. Other threads (the stop-signal handling of
:mod:`grpo_run.core.loop.signals`) ask :meth:`StepMonitor.held`. A verifier call whose step
overran the time limit stops the run when it returns (:mod:`grpo_run.core.scoring.async_verifiers`).

The blocking call itself cannot be interrupted from outside; the warning says what to fix."""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable, Generator, Iterator
from contextlib import contextmanager
from typing import Any

from grpo_run.core.crash_frames import named

POLL_S = 0.25
HOLD_S = 0.5
"""A step at least this long holds the event loop (a blocking call, not a coroutine's own work
between awaits): :attr:`StepMonitor.on_hold` hears of it (``train.max_loop_hold_s`` bounds their
total in a training step)."""

_ACTIVITY: dict[int, str] = {}
"""Per thread id: what finer-grained work runs there now (``tool 'python'``); see :func:`doing`."""


@contextmanager
def doing(what: str) -> Iterator[None]:
    """Note that this thread runs ``what`` (a tool call inside an environment's step), so that a
    report of a blocked loop or a hung call can name it. A plain dict keyed by thread id: other
    threads read it without a lock (single dict operations are atomic)."""
    ident = threading.get_ident()
    previous = _ACTIVITY.get(ident)
    _ACTIVITY[ident] = what
    try:
        yield
    finally:
        if previous is None:
            _ACTIVITY.pop(ident, None)
        else:
            _ACTIVITY[ident] = previous


def activity_of(ident: int | None) -> str | None:
    """What thread ``ident`` noted with :func:`doing`, if anything."""
    return None if ident is None else _ACTIVITY.get(ident)


class StepMonitor:
    """What async verifier code runs on the loop right now. Written by the loop's thread only."""

    def __init__(self) -> None:
        self.current: tuple[str, float] | None = None
        """(verifier name, ``time.monotonic()`` when its current step began), or None."""
        self.longest_step_s: dict[str, float] = {}
        """Per verifier: the longest single step seen (a blocking call shows here)."""
        self.thread: int | None = None
        """The loop's thread id (to read what it is :func:`doing`)."""
        self.on_hold: Callable[[str, float], None] | None = None
        """Called with (name, seconds) when a step that held the loop for :data:`HOLD_S` or more ends."""

    def held(self) -> tuple[str, float] | None:
        """(name, seconds) of the step holding the loop right now, the name saying what it is
        doing when it noted that (``environment 'x' step (in tool 'python')``); any thread."""
        current = self.current
        if current is None:
            return None
        activity = activity_of(self.thread)
        return (f"{current[0]} (in {activity})" if activity else current[0]), time.monotonic() - current[1]

    def enter(self, name: str) -> None:
        self.thread = threading.get_ident()
        self.current = (name, time.monotonic())

    def leave(self) -> float:
        """End the current step; returns how long it ran."""
        current, self.current = self.current, None
        if current is None:
            return 0.0
        took = time.monotonic() - current[1]
        if took > self.longest_step_s.get(current[0], 0.0):
            self.longest_step_s[current[0]] = took
        if took >= HOLD_S and self.on_hold is not None:
            self.on_hold(current[0], took)
        return took


class Tracked:
    """Awaits ``awaitable`` step by step, telling ``monitor`` when verifier code runs.

    Returns what the awaitable returns; ``blocked_s`` is the longest single step (time the
    verifier held the event loop without yielding).
    """

    def __init__(self, awaitable: Awaitable[Any], name: str, monitor: StepMonitor) -> None:
        self._awaitable = awaitable
        self._name = name
        self._monitor = monitor
        self.blocked_s = 0.0

    def __await__(self) -> Generator[Any, Any, Any]:
        inner = self._awaitable.__await__()
        send_value: Any = None
        throw: BaseException | None = None
        step = named(self._name)  # a crash report names the code (crash_frames.py)
        while True:
            self._monitor.enter(self._name)
            try:
                if throw is None:
                    yielded = step(inner.send, send_value)
                else:
                    yielded = step(inner.throw, throw)
            except StopIteration as stop:
                return stop.value
            finally:
                self.blocked_s = max(self.blocked_s, self._monitor.leave())
            try:
                send_value, throw = (yield yielded), None
            except GeneratorExit:
                inner.close()
                raise
            except BaseException as exc:  # cancellation and the like go on to the verifier
                send_value, throw = None, exc


def verifier_blocking(name: str, blocked: float) -> str:
    return (f"async verifier {name!r} has blocked the event loop for {blocked:.1f} s: "
            f"nothing else runs (no generation, no learner step, no timeout) until it returns. "
            f"It calls something blocking inside `async def score`; use an async client, or "
            f"make `score` a plain def so it runs in a killable worker process")


class LoopWatchdog:
    """A daemon thread that warns when one step runs longer than ``warn_after_s``: once per name,
    or with ``repeat_s`` every ``repeat_s`` while that step still runs. ``describe(name, seconds)``
    words the warning."""

    def __init__(self, monitor: StepMonitor, warn_after_s: float, warn: Callable[[str], None],
                 describe: Callable[[str, float], str] = verifier_blocking, repeat_s: float | None = None) -> None:
        self.monitor = monitor
        self.warn_after_s = warn_after_s
        self.warn = warn
        self.describe = describe
        self.repeat_s = repeat_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="grpo-run-loop-watchdog", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(1.0)

    def _watch(self) -> None:
        warned: set[str] = set()
        last: tuple[tuple[str, float], float] | None = None  # (the step, when it was last reported)
        while not self._stop.wait(POLL_S):
            current = self.monitor.current
            if current is None or (self.repeat_s is None and current[0] in warned):
                continue
            now = time.monotonic()
            blocked = now - current[1]
            if blocked < self.warn_after_s:
                continue
            if self.repeat_s is not None and last is not None and last[0] == current and now - last[1] < self.repeat_s:
                continue
            warned.add(current[0])
            last = (current, now)
            activity = activity_of(self.monitor.thread)
            self.warn(self.describe(f"{current[0]} (in {activity})" if activity else current[0], blocked))
