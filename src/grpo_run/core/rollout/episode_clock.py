"""The environment's own time in one episode the runner drives: what ``environment.episode_timeout_s`` limits.

An episode's wall time goes to the environment (its ``reset`` / ``step`` / ``finish`` / ``close``
calls and the tools they call; an agent's own code between its model calls), to waiting for the
policy (a turn waits for the engine's batched generation, which waits for the other episodes of
its round, and between rounds for the learner and weight syncs: on a busy machine one round of 64
SmolLM2 episodes took ~280 s), to waiting for a free environment thread, and to the event loop
serving the other episodes. Only the environment's own time counts: its calls only, a plain call
from the moment a thread starts running it to the moment it returns, as the thread saw them (so a
busy event loop that learns of either late adds nothing), an ``async def`` call while it is
awaited. (An episode that drives itself, ``run_episode``, has a clock of its own:
:mod:`.driven_clock`.)

:class:`EpisodeClock` is an ``asyncio.timeout`` whose deadline is lifted while the clock stands
still and set again, to what is left of the limit, when it runs. A slow ``step`` runs into the
limit, across turns. Not covered here: an ``async def`` call that blocks the event loop cannot be
cancelled by any timeout; the loop watchdog names it, and the call fails its episode when it
returns (``environment.step_timeout_s``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator


class EpisodeClock:
    """Counts an episode's environment time and cancels the episode when it passes ``limit_s``.

    Used on the episode's event loop: ``async with clock.running(): ...`` around the episode (it
    raises :class:`TimeoutError` at the limit); the clock stands still but inside :meth:`counting`
    and between :meth:`resume` and :meth:`pause`, and while any :meth:`waiting` block lasts (they
    may nest and overlap).
    :meth:`pause` and :meth:`resume` take the time a thread saw (``time.monotonic()``, the loop's
    clock) instead of now."""

    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        self.waited_s = 0.0
        """Time the clock stood still while the episode ran (not counted)."""
        self._used = 0.0
        """Environment time before the current stretch."""
        self._since: float | None = None
        """Loop time when the current stretch of environment time began (None: standing still)."""
        self._stops = 0
        """Reasons the clock stands still now (waits, or the runner's own code)."""
        self._stopped_at: float | None = None
        self._timeout: asyncio.Timeout | None = None
        self._expired = False

    @property
    def spent_s(self) -> float:
        """The environment's time so far."""
        if self._since is None:
            return self._used
        return self._used + asyncio.get_running_loop().time() - self._since

    def split(self) -> str:
        """How the time split, for the message of an episode that ran past the limit."""
        return (f"{self.spent_s:.1f} s in its calls; the other {self.waited_s:.1f} s, waiting for generation, "
                f"threads or the event loop, do not count")

    @property
    def expired(self) -> bool:
        """The limit was reached (the episode was cancelled for it)."""
        return self._expired or (self._timeout is not None and self._timeout.expired())

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[EpisodeClock]:
        """The episode runs in the block; :class:`TimeoutError` when its environment time passes the
        limit. The clock starts standing still."""
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(None) as timeout:
            self._timeout = timeout
            self._stops, self._stopped_at = 1, loop.time()
            try:
                yield self
            finally:
                self._expired = timeout.expired()
                self.pause()
                self._timeout = None

    def waiting(self) -> contextlib.AbstractContextManager[None]:
        """The episode waits in the block (for the policy): the clock stands still."""
        return _between(self.pause, self.resume)

    def counting(self) -> contextlib.AbstractContextManager[None]:
        """The environment's code runs in the block (an ``async def`` call): the clock runs."""
        return _between(self.resume, self.pause)

    def add(self, seconds: float) -> None:
        """Count ``seconds`` of environment time that ran while the clock stood still (a call whose
        start the loop learnt of only after it was over); past the limit, the episode is cancelled."""
        self._used += max(0.0, seconds)
        if self._used >= self.limit_s and self._timeout is not None and not self._timeout.expired():
            self._timeout.reschedule(asyncio.get_running_loop().time())

    def pause(self, at: float | None = None) -> None:
        """Stand still from ``at`` (default: now) until the matching :meth:`resume`."""
        self._stops += 1
        if self._stops > 1:
            return
        now = asyncio.get_running_loop().time() if at is None else at
        self._stopped_at = now
        if self._since is not None:
            self._used += max(0.0, now - self._since)
            self._since = None
        if self._timeout is not None and not self._timeout.expired():
            self._timeout.reschedule(None)

    def resume(self, at: float | None = None) -> None:
        """Run again from ``at`` (default: now) once nothing else holds the clock still."""
        self._stops -= 1
        if self._stops > 0:
            return
        now = asyncio.get_running_loop().time() if at is None else at
        if self._stopped_at is not None:
            self.waited_s += max(0.0, now - self._stopped_at)
            self._stopped_at = None
        if self._timeout is None or self._timeout.expired():
            return  # the episode is over (a request of an agent's may come back later)
        self._since = now
        self._timeout.reschedule(now + max(0.0, self.limit_s - self._used))


@contextlib.contextmanager
def _between(first: Callable[[], None], then: Callable[[], None]) -> Iterator[None]:
    first()
    try:
        yield
    finally:
        then()
