"""When an event loop was too busy to run what was ready: the waits an episode's clock does not count.

A coroutine whose awaited result has come still waits for its turn on the event loop: behind the
other episodes' code (128 agents building their HTTP clients take seconds of one loop between
them), the run's own work, or a machine so loaded that the loop's thread does not get a CPU.
asyncio keeps no record of that wait. :class:`LoopLag` measures it from outside: a daemon thread
puts a probe in the loop's queue of ready callbacks every :data:`PROBE_EVERY_S` (one at a time)
and notes how long it waited there. A probe that waited longer than :data:`TOLERANCE_S` marks the
stretch from its entry (plus the tolerance) to its run as *busy*: anything that became ready
meanwhile waited behind the same queue. (Without the tolerance taken off, a loop always a little
late, as under a thread that keeps the interpreter's lock, would be busy most of the time, and
an agent hung on something that never comes would never reach its limit.) A driven episode's clock (:mod:`.driven_clock`) does not count its waits during
busy stretches.

One meter per event loop, shared by the episodes on it (:meth:`LoopLags.acquire`); its thread
runs only while some episode holds it.
"""

from __future__ import annotations

import asyncio
import bisect
import threading
import time
import weakref

PROBE_EVERY_S = 0.02
"""How often the meter's thread looks at the loop (at most one probe waits at a time)."""
TOLERANCE_S = 0.01
"""A probe that waited longer than this found the loop busy (a free loop runs it within a
fraction of a millisecond; a busy machine's thread scheduling adds a few)."""


class LoopLag:
    """Busy stretches of one event loop (``time.monotonic()``, the loop's clock), as probes saw them."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._starts: list[float] = []
        self._ends: list[float] = []
        """Busy stretches, in order and disjoint (written on the loop's thread only)."""
        self.pending: float | None = None
        """When the probe now waiting in the loop's queue entered it (None: none waits)."""
        self.users: dict[int, float] = {}
        """Per holder (an episode): the earliest time it may still ask about."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="grpo-run-loop-lag", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()

    def busy_stretches(self, start: float, end: float) -> list[tuple[float, float]]:
        """The busy stretches within ``[start, end]``, clipped to it."""
        out = []
        i = max(0, bisect.bisect_right(self._ends, start))
        while i < len(self._starts) and self._starts[i] < end:
            out.append((max(start, self._starts[i]), min(end, self._ends[i])))
            i += 1
        pending = self.pending
        if pending is not None and time.monotonic() - pending > TOLERANCE_S:
            since = max(start, pending + TOLERANCE_S, self._ends[-1] if self._ends else start)
            if since < end:
                out.append((since, end))
        return out

    def forget_before(self, when: float) -> None:
        """Drop the stretches that ended before ``when`` (nobody asks about them any more)."""
        cut = bisect.bisect_left(self._ends, when)
        if cut:
            del self._starts[:cut], self._ends[:cut]

    def _arrived(self, entered: float) -> None:
        """On the loop's thread: the probe that entered the queue at ``entered`` runs now."""
        now = time.monotonic()
        if now - entered > TOLERANCE_S:
            start = entered + TOLERANCE_S
            if self._ends and start <= self._ends[-1]:
                self._ends[-1] = max(self._ends[-1], now)
            else:
                self._starts.append(start)
                self._ends.append(now)
        self.pending = None

    def _watch(self) -> None:
        while not self._stop.wait(PROBE_EVERY_S):
            if self.pending is not None:
                continue
            self.pending = entered = time.monotonic()
            try:
                self.loop.call_soon_threadsafe(self._arrived, entered)
            except RuntimeError:  # the loop is closed
                return


class LoopLags:
    """The meters of the event loops episodes run on, each running while some episode holds it."""

    def __init__(self) -> None:
        self._meters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopLag] = weakref.WeakKeyDictionary()

    def acquire(self, holder: object) -> LoopLag:
        """The running loop's meter (started if need be), held by ``holder`` until :meth:`release`."""
        loop = asyncio.get_running_loop()
        meter = self._meters.get(loop)
        if meter is None:
            meter = self._meters[loop] = LoopLag(loop)
        meter.users[id(holder)] = time.monotonic()
        return meter

    def keep_from(self, meter: LoopLag, holder: object, when: float) -> None:
        """``holder`` asks about nothing before ``when`` any more."""
        meter.users[id(holder)] = when
        meter.forget_before(min(meter.users.values()))

    def release(self, meter: LoopLag, holder: object) -> None:
        meter.users.pop(id(holder), None)
        if meter.users:
            meter.forget_before(min(meter.users.values()))
            return
        meter.close()
        if self._meters.get(meter.loop) is meter:
            del self._meters[meter.loop]

    def close(self) -> None:
        for meter in list(self._meters.values()):
            meter.close()
        self._meters.clear()
