"""Watches the event loop for async verifiers that block it.

An ``async def score`` that calls something blocking (``time.sleep``, a sync HTTP client) holds
the whole event loop: no other call, no generation, no learner step and no ``asyncio.timeout``
can run until it returns, so the run stalls without a word. Every step of an async verifier's
coroutine is wrapped (:class:`Tracked`): it notes which verifier runs and since when. A daemon
thread (:class:`LoopWatchdog`) looks every :data:`POLL_S` seconds; when one step has run longer
than ``warn_after_s`` it warns, once per verifier, naming it. A call whose step overran the time
limit stops the run when it returns (:mod:`grpo_run.core.scoring.async_verifiers`).

The blocking call itself cannot be interrupted from outside; the warning says what to fix.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable, Generator
from typing import Any

POLL_S = 0.25


class StepMonitor:
    """What async verifier code runs on the loop right now. Written by the loop's thread only."""

    def __init__(self) -> None:
        self.current: tuple[str, float] | None = None
        """(verifier name, ``time.monotonic()`` when its current step began), or None."""
        self.longest_step_s: dict[str, float] = {}
        """Per verifier: the longest single step seen (a blocking call shows here)."""

    def enter(self, name: str) -> None:
        self.current = (name, time.monotonic())

    def leave(self) -> float:
        """End the current step; returns how long it ran."""
        current, self.current = self.current, None
        if current is None:
            return 0.0
        took = time.monotonic() - current[1]
        if took > self.longest_step_s.get(current[0], 0.0):
            self.longest_step_s[current[0]] = took
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
        while True:
            self._monitor.enter(self._name)
            try:
                if throw is None:
                    yielded = inner.send(send_value)
                else:
                    yielded = inner.throw(throw)
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


class LoopWatchdog:
    """A daemon thread that warns (once per verifier) when one step runs longer than ``warn_after_s``."""

    def __init__(self, monitor: StepMonitor, warn_after_s: float, warn: Callable[[str], None]) -> None:
        self.monitor = monitor
        self.warn_after_s = warn_after_s
        self.warn = warn
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="grpo-run-loop-watchdog", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(1.0)

    def _watch(self) -> None:
        warned: set[str] = set()
        while not self._stop.wait(POLL_S):
            current = self.monitor.current
            if current is None or current[0] in warned:
                continue
            blocked = time.monotonic() - current[1]
            if blocked >= self.warn_after_s:
                warned.add(current[0])
                self.warn(
                    f"async verifier {current[0]!r} has blocked the event loop for {blocked:.1f} s: "
                    f"nothing else runs (no generation, no learner step, no timeout) until it returns. "
                    f"It calls something blocking inside `async def score`; use an async client, or "
                    f"make `score` a plain def so it runs in a killable worker process"
                )
