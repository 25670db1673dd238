"""Local worker processes that serve one object's methods over a pipe.

:class:`ProcessWorker` starts a ``spawn`` child that builds an object from a picklable factory
and then runs the calls it is sent, one at a time, in order. Each call is answered through a
``concurrent.futures.Future`` resolved by a reader thread, so a driver can wait on several
workers at once. When the child dies, its pending futures fail at once with
:class:`WorkerDied` (the pipe closes), naming the worker, its pid and exit code.

The child ignores SIGINT (Ctrl-C is the parent's to handle: it decides whether to save and stop)
and dies with its parent (Linux ``PR_SET_PDEATHSIG``), so no learner outlives a killed run; the
start, those two and the stop are the worker-process base's (:mod:`grpo_run.core.processes`). The
kernel ties dying with the parent to the *thread* that started the child: start workers from a
thread that lives as long as they should (the main thread).
``torch.multiprocessing`` is imported on both sides: tensors in results travel through shared
memory.
"""

from __future__ import annotations

import itertools
import multiprocessing.connection
import os
import pickle
import signal
import threading
import traceback
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import torch.multiprocessing  # noqa: F401 - tensor pickling through shared memory

from grpo_run.core.processes import ask_to_exit, enter_worker, kill_worker, start_worker
from grpo_run.core.spawn import spawn_context


class WorkerDied(RuntimeError):
    """A worker process ended while a call was pending."""


class RemoteError(RuntimeError):
    """A call raised an exception that could not be sent back as itself."""


class ProcessWorker:
    """One child process serving the object ``factory()`` builds (see the module docstring)."""

    def __init__(self, name: str, factory: Callable[[], Any], *, threads: int = 1, context: Any = None) -> None:
        self.name = name
        self._factory = pickle.dumps(factory)  # unpickled in the child after its threads are set
        self._threads = threads
        self._ctx = context if context is not None else spawn_context()
        self._process: Any = None
        self._conn: multiprocessing.connection.Connection | None = None
        self._pending: dict[int, Future] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._reader: threading.Thread | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self) -> None:
        self._process, self._conn = start_worker(self._ctx, _serve, (self._factory, self._threads), self.name)
        self._reader = threading.Thread(target=self._read, name=f"{self.name}-reader", daemon=True)
        self._reader.start()

    def submit(self, method: str, *args: Any) -> Future:
        """Run ``method(*args)`` on the worker's object; the future holds its result or exception."""
        future: Future = Future()
        with self._lock:
            if self._conn is None:
                future.set_exception(WorkerDied(f"{self.describe()} is not running"))
                return future
            call_id = next(self._ids)
            self._pending[call_id] = future
            try:
                self._conn.send((call_id, method, args))
            except (OSError, ValueError):  # broken pipe: it died; the reader fails the future
                pass
        return future

    def describe(self) -> str:
        """``"<name> (pid N)"``, with its exit status once it has ended."""
        if self._process is None:
            return self.name
        code = self._process.exitcode
        if code is None:
            return f"{self.name} (pid {self._process.pid})"
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        return f"{self.name} (pid {self._process.pid}, {how})"

    def close(self, grace_s: float = 10.0) -> None:
        """Ask the worker to finish, kill it if it has not within ``grace_s``, and reap it."""
        if self._process is None or self._process.pid is None:
            return
        with self._lock:
            ask_to_exit(self._conn)
        self._process.join(grace_s)
        self.kill()

    def kill(self) -> None:
        if self._process is None or self._process.pid is None:  # never started
            return
        kill_worker(self._process)
        if self._reader is not None and self._reader is not threading.current_thread():
            self._reader.join(5.0)

    # -- reader thread ---------------------------------------------------------------------

    def _read(self) -> None:
        assert self._conn is not None
        while True:
            try:
                call_id, ok, value = self._conn.recv()
            except (EOFError, OSError):  # the child is gone
                break
            except Exception as exc:  # a result that cannot be unpickled here
                call_id, ok, value = _last_pending(self._pending), False, (RemoteError(str(exc)), "")
            future = self._pending.pop(call_id, None)
            if future is None:
                continue
            if ok:
                future.set_result(value)
            else:
                error, remote_traceback = value
                if remote_traceback:
                    error.add_note(f"in {self.name}:\n{remote_traceback}")
                future.set_exception(error)
        self._process.join(1.0)
        with self._lock:
            conn, self._conn = self._conn, None
            pending, self._pending = self._pending, {}
        conn.close()
        for future in pending.values():
            future.set_exception(WorkerDied(f"{self.describe()} died"))


def _last_pending(pending: dict[int, Future]) -> int:
    return max(pending) if pending else -1


def _serve(conn: multiprocessing.connection.Connection, factory: bytes, threads: int, parent_pid: int) -> None:
    enter_worker(parent_pid)  # the parent decides what Ctrl-C means
    os.environ["OMP_NUM_THREADS"] = str(threads)  # before anything imports torch's thread pools
    obj = pickle.loads(factory)()
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        call_id, method, args = message
        try:
            reply = (call_id, True, getattr(obj, method)(*args))
        except BaseException as exc:  # everything goes back to the driver, which decides
            reply = (call_id, False, _portable(exc))
        try:
            conn.send(reply)
        except Exception as exc:  # an unpicklable result
            conn.send((call_id, False, (RemoteError(f"{method} returned something that cannot be sent: {exc}"), "")))


def _portable(exc: BaseException) -> tuple[BaseException, str]:
    text = "".join(traceback.format_exception(exc))
    try:
        pickle.loads(pickle.dumps(exc))
        return exc, text
    except Exception:
        return RemoteError(f"{type(exc).__name__}: {exc}"), text
