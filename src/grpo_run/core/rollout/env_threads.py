"""A pool of daemon threads for synchronous environment code, replacing threads that hang.

``concurrent.futures.ThreadPoolExecutor`` joins its threads when the interpreter exits, so one
environment step that never returns would hang the process at exit after the run had already
dropped the episode. These threads are daemons, abandoned at exit.

A running call cannot be stopped from outside. A call its caller gave up on (past its timeout,
or its episode cancelled) is *abandoned*: its thread no longer counts toward the pool's size, a
new thread takes its place, and the old one ends when (if ever) the call returns. A call still
running ``hang_grace_s`` after it was abandoned *hangs*; when more than ``max_abandoned`` hang,
:meth:`DaemonThreadPool.run` raises :class:`TooManyHungCalls` (the caller stops the run) instead
of leaking a thread per call. (Calls that are only slow return within the grace; until they do,
the pool holds at most one thread per call in flight.)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from grpo_run.core.scoring.loop_watchdog import activity_of

T = TypeVar("T")
_STOP = object()


class CallTimedOut(asyncio.TimeoutError):
    """A call ran past its timeout (and was abandoned); ``doing``: what its thread noted it was
    doing (:func:`~grpo_run.core.scoring.loop_watchdog.doing`), if anything."""

    def __init__(self, doing: str | None) -> None:
        super().__init__(doing or "")
        self.doing = doing


class TooManyHungCalls(Exception):
    """More than ``max_abandoned`` calls of the pool are still running past their limits;
    ``calls``: how many of them hang in what (``step in tool 'python'``), adding up to ``hung``."""

    def __init__(self, hung: int, limit: int, calls: Mapping[str, int] | None = None) -> None:
        super().__init__(f"{hung} calls hang (at most {limit} may)")
        self.hung, self.limit = hung, limit
        self.calls = dict(calls or {})


class DaemonThreadPool:
    """``size`` daemon threads running submitted calls in order; a hung call's thread is replaced."""

    def __init__(self, size: int, name: str = "env", max_abandoned: int | None = None,
                 hang_grace_s: float = 10.0) -> None:
        if size < 1:
            raise ValueError(f"a pool needs at least one thread, got {size}")
        self.size = size
        self.max_abandoned = size if max_abandoned is None else max_abandoned
        """Hanging calls allowed at most (default: ``size``)."""
        self.hang_grace_s = hang_grace_s
        """How long an abandoned call may still run before it counts as hanging."""
        self._name = name
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._running: dict[concurrent.futures.Future[Any], threading.Thread] = {}
        self._abandoned: dict[threading.Thread, tuple[float, str]] = {}
        """Threads of abandoned calls still running: when each was abandoned, and what it runs."""
        self._what: dict[concurrent.futures.Future[Any], str] = {}
        """What each queued or running call is (``step``), for the words about hung calls."""
        self._numbers = itertools.count()
        self._closed = False
        for _ in range(size):
            self._spawn()

    @property
    def hung(self) -> int:
        """Abandoned calls still running."""
        return len(self._abandoned)

    def _too_many(self) -> TooManyHungCalls | None:
        cutoff = time.monotonic() - self.hang_grace_s
        hanging = [(thread, what) for thread, (since, what) in list(self._abandoned.items()) if since <= cutoff]
        if len(hanging) <= self.max_abandoned:
            return None
        calls = Counter(_doing(what, activity_of(thread.ident)) for thread, what in hanging)
        return TooManyHungCalls(len(hanging), self.max_abandoned, calls)

    def submit(self, fn: Callable[..., T], *args: Any, started: concurrent.futures.Future[float] | None = None,
               what: str = "call") -> concurrent.futures.Future[T]:
        """Queue ``fn(*args)``; ``started`` (when given) is resolved, with ``time.monotonic()``, as a
        thread picks it up;
        ``what``: the call's name in the words about hung calls."""
        if self._closed:
            raise RuntimeError("the environment thread pool is closed")
        too_many = self._too_many()
        if too_many is not None:
            raise too_many
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._what[future] = what
        future.add_done_callback(self._forget)
        self._jobs.put((future, started, fn, args))
        return future

    def _forget(self, future: concurrent.futures.Future[Any]) -> None:
        self._what.pop(future, None)

    async def run(self, fn: Callable[..., T], *args: Any, timeout: float | None = None,
                  on_start: Callable[[float], None] | None = None, what: str = "call") -> T:
        """Await ``fn(*args)`` run on a pool thread; ``timeout`` counts from when it starts running
        (waiting for a free thread is bounded by the caller). ``on_start(t)``: told, on the event
        loop, the ``time.monotonic()`` at which the thread began the call, if the call still runs
        when the loop learns that it began. Cancelling the await abandons the call. Raises
        :class:`TimeoutError` on overrun."""
        started: concurrent.futures.Future[float] = concurrent.futures.Future()
        done = self.submit(fn, *args, started=started, what=what)
        try:
            began = await asyncio.wrap_future(started)
            if on_start is not None and not done.done():
                on_start(began)
            return await asyncio.wait_for(asyncio.wrap_future(done), timeout)
        except asyncio.TimeoutError:
            thread = self._running.get(done)
            raise CallTimedOut(activity_of(thread.ident if thread is not None else None)) from None
        finally:
            done.cancel()  # still queued: never run it (a running call cannot be stopped)
            if not done.done():
                self.abandon(done)

    def abandon(self, future: concurrent.futures.Future[Any]) -> None:
        """Give up on ``future``'s running call: a new thread takes its thread's place."""
        with self._lock:
            thread = self._running.get(future)
            if thread is None or thread in self._abandoned:
                return
            self._abandoned[thread] = (time.monotonic(), self._what.get(future, "call"))
            if not self._closed:
                self._spawn()

    def close(self) -> None:
        """Stop the threads once their current call returns (a hung one is abandoned)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                for _ in range(self.size):
                    self._jobs.put(_STOP)

    def _spawn(self) -> None:
        thread = threading.Thread(target=self._work, name=f"{self._name}-{next(self._numbers)}", daemon=True)
        thread.start()

    def _work(self) -> None:
        me = threading.current_thread()
        while True:
            job = self._jobs.get()
            if job is _STOP:
                return
            future, started, fn, args = job
            with self._lock:  # before it runs: an abandon() racing with the start finds it
                self._running[future] = me
                too_many = self._too_many()
            if not future.set_running_or_notify_cancel():
                with self._lock:
                    del self._running[future]
                continue
            if started is not None:
                try:
                    started.set_result(time.monotonic())
                except concurrent.futures.InvalidStateError:  # its waiter was cancelled meanwhile
                    pass
            if too_many is not None:  # queued before the limit was passed: it must not take another thread
                with self._lock:
                    del self._running[future]
                future.set_exception(too_many)
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # handed to the awaiting episode
                future.set_exception(exc)
            with self._lock:
                del self._running[future]
                if me in self._abandoned:  # replaced while it hung: this thread is surplus now
                    del self._abandoned[me]
                    return


def _doing(what: str, activity: str | None) -> str:
    """``step``, or ``step in tool 'python'`` where the thread noted what it runs."""
    return f"{what} in {activity}" if activity else what
