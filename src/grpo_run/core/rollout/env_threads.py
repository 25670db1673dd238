"""A fixed pool of daemon threads for synchronous environment code.

``concurrent.futures.ThreadPoolExecutor`` joins its threads when the interpreter exits, so one
environment step that never returns would hang the process at exit after the run had already
dropped the episode. These threads are daemons: a hung call occupies one of them (later calls
queue, and time out under their own limits) and is abandoned at exit.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
_STOP = object()


class DaemonThreadPool:
    """``size`` daemon threads running submitted calls in order."""

    def __init__(self, size: int, name: str = "env") -> None:
        if size < 1:
            raise ValueError(f"a pool needs at least one thread, got {size}")
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True) for i in range(size)]
        for thread in self._threads:
            thread.start()
        self._closed = False

    def submit(self, fn: Callable[..., T], *args: Any,
               started: concurrent.futures.Future[None] | None = None) -> concurrent.futures.Future[T]:
        """Queue ``fn(*args)``; ``started`` (when given) is resolved as a thread picks it up."""
        if self._closed:
            raise RuntimeError("the environment thread pool is closed")
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._jobs.put((future, started, fn, args))
        return future

    async def run(self, fn: Callable[..., T], *args: Any, timeout: float | None = None) -> T:
        """Await ``fn(*args)`` run on a pool thread; ``timeout`` counts from when it starts running
        (waiting for a free thread is bounded by the caller, e.g. the episode's own limit).
        Cancelling the await abandons the call. Raises :class:`TimeoutError` on overrun."""
        started: concurrent.futures.Future[None] = concurrent.futures.Future()
        done = self.submit(fn, *args, started=started)
        try:
            await asyncio.wrap_future(started)
            return await asyncio.wait_for(asyncio.wrap_future(done), timeout)
        finally:
            done.cancel()  # still queued: never run it (a running call cannot be stopped)

    def close(self) -> None:
        """Stop the threads once their current call returns (a hung one is abandoned)."""
        if not self._closed:
            self._closed = True
            for _ in self._threads:
                self._jobs.put(_STOP)

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is _STOP:
                return
            future, started, fn, args = job
            if not future.set_running_or_notify_cancel():
                continue
            if started is not None:
                try:
                    started.set_result(None)
                except concurrent.futures.InvalidStateError:  # its waiter was cancelled meanwhile
                    pass
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # handed to the awaiting episode
                future.set_exception(exc)
