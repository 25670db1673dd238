"""The own time of an episode that drives itself (``run_episode``: an agent), under ``episode_timeout_s``.

Such an episode is one coroutine on the run's event loop. Its wall time splits into:

* its *steps*: the coroutine runs its own code (between two awaits), counted as the CPU time of
  the loop's thread meanwhile (on a loaded machine the step's wall time also holds the time the
  thread waited for a CPU or for the interpreter's lock; a blocking call inside ``async def``,
  which holds the loop without using the CPU, is bounded by ``step_timeout_s`` and
  ``train.max_loop_hold_s`` instead);
* waits *for the run*: a ``chat.complete`` call, and each request of an agent's at the run's
  endpoint from the moment its code began the wait it is part of (the coroutine's current await,
  or the end of the endpoint's previous answer, whichever is later: the request's way through
  the HTTP client and server counts with the wait) until the endpoint has answered -- not counted;
* waits *for the event loop*: stretches when the loop was too busy to run what was ready
  (:mod:`.loop_lag`: other episodes' code, the run's own work, a loaded machine) -- not counted;
* the rest of its awaits (a sleep, a tool's subprocess, a call to another service) -- counted.

:class:`DrivenClock` keeps that account as the episode goes: the coroutine is stepped through
:meth:`DrivenClock.steps`, which says when each step begins and ends; :meth:`waiting` marks a wait
for the run, from any thread. ``async with clock.running()`` raises :class:`TimeoutError` once
the counted time passes the limit (checked after each step, and by a timer while the coroutine
waits). Code in tasks the episode starts itself (``asyncio.gather`` of its own coroutines) counts
only as the episode waiting for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Generator, Iterator
from typing import Any

from grpo_run.core.rollout.loop_lag import LoopLag, LoopLags

MIN_RECHECK_S = 0.01
"""The shortest time between two looks of the timer at a waiting episode's clock."""


class DrivenClock:
    """Counts a driven episode's own time (see the module docstring) and cancels it past ``limit_s``."""

    def __init__(self, limit_s: float, lags: LoopLags | None = None) -> None:
        self.limit_s = limit_s
        self._lags = lags
        self._meter: LoopLag | None = None
        self.code_s = 0.0
        """Counted: the episode's code running."""
        self.awaiting_s = 0.0
        """Counted: its other awaits (not for the run, not behind a busy loop)."""
        self.run_s = 0.0
        """Not counted: waiting for the run (its model calls)."""
        self.loop_s = 0.0
        """Not counted: waiting behind a busy event loop."""
        self._cursor: float | None = None
        """Time up to which the account is kept (None: not running)."""
        self._in_step = False
        self._cpu: float | None = None
        """The loop thread's CPU time when the part of the current step last accounted for ended."""
        self._step_start: tuple[float, float] = (0.0, 0.0)
        """Wall and CPU time when the current step began."""
        self._own_waits = 0
        """Waits for the run that the episode's code began (``chat.complete``), still open."""
        self._waits: list[list[Any]] = []
        """Waits for the run: ``[start, end or None]``, by start."""
        self._open = 0
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._timeout: asyncio.Timeout | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._expired = False

    # -- what the runner reads ----------------------------------------------------------------

    @property
    def spent_s(self) -> float:
        """The episode's counted time so far."""
        code, awaiting, _, _ = self._partial()
        return self.code_s + code + self.awaiting_s + awaiting

    @property
    def waited_s(self) -> float:
        """Time not counted so far (waiting for the run or for the event loop)."""
        _, _, run, loop = self._partial()
        return self.run_s + run + self.loop_s + loop

    @property
    def expired(self) -> bool:
        return self._expired or (self._timeout is not None and self._timeout.expired())

    def split(self) -> str:
        """How the time split, for the message of an episode that ran past the limit."""
        code, awaiting, run, loop = self._partial()
        code, awaiting, run, loop = self.code_s + code, self.awaiting_s + awaiting, self.run_s + run, self.loop_s + loop
        return (f"{code + awaiting:.1f} s of its own: {code:.1f} s running its code, {awaiting:.1f} s awaiting "
                f"other things than the policy; not counted: {run:.1f} s waiting for the policy, "
                f"{loop:.1f} s for the busy event loop or a CPU")

    # -- the episode ----------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[DrivenClock]:
        """The episode runs in the block; :class:`TimeoutError` when its own time passes the limit."""
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        if self._lags is not None:
            self._meter = self._lags.acquire(self)
        async with asyncio.timeout(None) as timeout:
            self._timeout = timeout
            self._cursor = time.monotonic()
            self._arm()
            try:
                yield self
            finally:
                self._advance(time.monotonic())
                self._cursor = None
                self._cancel_timer()
                self._expired = timeout.expired()
                self._timeout = None
                if self._meter is not None and self._lags is not None:
                    self._lags.release(self._meter, self)
                    self._meter = None

    def steps(self, awaitable: Awaitable[Any]) -> Awaitable[Any]:
        """``awaitable``, stepped so that the clock knows when the episode's code runs."""
        return _Stepped(awaitable, self)

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """The episode waits for the run in the block (a model call); from any thread."""
        self.begin_wait()
        try:
            yield
        finally:
            self.end_wait()

    def begin_wait(self) -> None:
        now = time.monotonic()
        own_step = self._in_step and threading.get_ident() == self._loop_thread
        if own_step:
            self._step_cpu()
            self._own_waits += 1
        with self._lock:
            self._open += 1
            if self._open > 1:
                return
            start = now
            if not self._in_step and self._cursor is not None:  # the episode's code awaits: since then
                start = max(self._cursor, self._waits[-1][1] if self._waits else self._cursor)
            self._waits.append([min(start, now), None])

    def end_wait(self) -> None:
        now = time.monotonic()
        if self._in_step and threading.get_ident() == self._loop_thread and self._own_waits:
            self._step_cpu()
            self._own_waits -= 1
        with self._lock:
            self._open -= 1
            if self._open == 0 and self._waits:
                self._waits[-1][1] = now

    # -- the account ----------------------------------------------------------------------------

    def step_began(self) -> None:
        self._cancel_timer()
        now = time.monotonic()
        self._advance(now)
        self._in_step = True
        self._cpu = time.thread_time()
        self._step_start = (now, self._cpu)

    def step_ended(self) -> None:
        self._step_cpu()
        now = time.monotonic()
        self.loop_s += max(0.0, now - self._step_start[0] - (time.thread_time() - self._step_start[1]))
        self._cursor = now
        self._in_step = False
        self._cpu = None
        self._arm()

    def _step_cpu(self) -> None:
        """Account for the loop thread's CPU time since the last look, in the current step: the
        episode's code, or the run's (inside a wait the episode's code began: ``chat.complete``)."""
        if self._cpu is None:
            return
        cpu = time.thread_time()
        if self._own_waits:
            self.run_s += cpu - self._cpu
        else:
            self.code_s += cpu - self._cpu
        self._cpu = cpu

    def _advance(self, now: float) -> None:
        """Account for the time from the cursor to ``now``."""
        if self._cursor is None:
            return
        code, awaiting, run, loop = self._account(self._cursor, now)
        self.code_s += code
        self.awaiting_s += awaiting
        self.run_s += run
        self.loop_s += loop
        self._cursor = now
        self._forget(now)

    def _partial(self) -> tuple[float, float, float, float]:
        if self._cursor is None:
            return 0.0, 0.0, 0.0, 0.0
        return self._account(self._cursor, time.monotonic())

    def _account(self, start: float, end: float) -> tuple[float, float, float, float]:
        """(code, awaiting, run, loop) seconds of ``[start, end]``, in the state the episode is in."""
        if end <= start:
            return 0.0, 0.0, 0.0, 0.0
        with self._lock:
            waits = [(s, end if e is None else e) for s, e in self._waits]
        if self._in_step:  # by CPU time, in _step_cpu
            cpu = max(0.0, time.thread_time() - self._cpu) if self._cpu is not None else 0.0
            return (0.0, 0.0, cpu, 0.0) if self._own_waits else (cpu, 0.0, 0.0, 0.0)
        run_stretches = waits
        busy = self._meter.busy_stretches(start, end) if self._meter is not None else []
        run = _covered(start, end, run_stretches)
        either = _covered(start, end, run_stretches + busy)
        return 0.0, end - start - either, run, either - run

    def _forget(self, before: float) -> None:
        with self._lock:
            while len(self._waits) > 1 and self._waits[0][1] is not None and self._waits[0][1] < before:
                self._waits.pop(0)
        if self._meter is not None and self._lags is not None:
            self._lags.keep_from(self._meter, self, before)

    # -- the limit ------------------------------------------------------------------------------

    def _arm(self) -> None:
        """While the episode waits: look again when the limit could be reached, at the earliest."""
        if self._loop is None or self.expired:
            return
        left = self.limit_s - self.spent_s
        if left <= 0:
            self._expire()
        elif left != float("inf"):
            self._timer = self._loop.call_later(max(left, MIN_RECHECK_S), self._check)

    def _check(self) -> None:
        self._timer = None
        if self._cursor is not None and not self._in_step:
            self._arm()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        if self._timeout is not None and not self._timeout.expired() and self._loop is not None:
            self._timeout.reschedule(self._loop.time())


def _covered(start: float, end: float, stretches: list[tuple[float, float]]) -> float:
    """Seconds of ``[start, end]`` inside the union of ``stretches``."""
    total, reached = 0.0, start
    for s, e in sorted(stretches):
        s, e = max(s, reached), min(e, end)
        if e > s:
            total += e - s
            reached = e
    return total


class _Stepped:
    """Awaits ``awaitable`` step by step, telling the clock when each step begins and ends."""

    def __init__(self, awaitable: Awaitable[Any], clock: DrivenClock) -> None:
        self._awaitable = awaitable
        self._clock = clock

    def __await__(self) -> Generator[Any, Any, Any]:
        inner = self._awaitable.__await__()
        send_value: Any = None
        throw: BaseException | None = None
        while True:
            self._clock.step_began()
            try:
                yielded = inner.send(send_value) if throw is None else inner.throw(throw)
            except StopIteration as stop:
                return stop.value
            finally:
                self._clock.step_ended()
            try:
                send_value, throw = (yield yielded), None
            except GeneratorExit:
                inner.close()
                raise
            except BaseException as exc:  # cancellation goes on to the episode's code
                send_value, throw = None, exc
