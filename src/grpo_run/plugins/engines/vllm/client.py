"""The trainer's end of the vLLM worker process: starting it, talking to it, noticing its death.

Messages from the worker are read by one thread and handed to whoever waits for their key (a
generate call's stream, a weight update's acknowledgement), on that waiter's own event loop: the
engine may be used from several ``asyncio.run`` calls in turn. When the worker dies every waiter
gets the reason at once, so nothing waits forever on a process that is gone.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import os
import queue
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from grpo_run import RunError, UserError
from grpo_run.plugins.engines.vllm import worker as wire

WORKER_SCRIPT = Path(wire.__file__).resolve()
DIED = "died"
"""Kind of the message every waiter receives when the worker process is gone."""
OUTPUT_TAIL_LINES = 40
STOPPED_GRACE_S = 5.0
"""A worker process stopped (SIGSTOP, a debugger) this long while the trainer waits on it is
given up: it is killed and the run stops, instead of waiting out ``weight_sync_timeout_s``."""
_STOPPED = ("stopped", "tracing-stop")
"""psutil's states of a process that cannot run until someone continues it."""


class WorkerError(RunError):
    """The vLLM worker process failed, died or did not answer in time."""


class WorkerClient:
    """Starts ``python -P worker.py`` and exchanges messages with it."""

    def __init__(self, python: str, options: Mapping[str, Any], env: Mapping[str, str], *,
                 startup_timeout_s: float, forward_output: bool = True) -> None:
        # Two locks: a sender blocked on a full socket must never keep the reader from
        # dispatching (the worker may itself be blocked sending to us).
        self._send_lock = threading.Lock()
        self._handlers_lock = threading.Lock()
        self._handlers: dict[int, Callable[[tuple], None]] = {}
        self._keys = itertools.count(1)
        self.failure: str | None = None
        self.last_heard = time.monotonic()
        """When the worker last sent anything (or we last asked it something)."""
        self._fatal: str | None = None
        self._stopped_since: float | None = None
        self.output_tail: collections.deque[str] = collections.deque(maxlen=OUTPUT_TAIL_LINES)
        ours, theirs = socket.socketpair()
        try:
            self.proc = subprocess.Popen(
                [python, "-P", str(WORKER_SCRIPT), str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), env=dict(env), stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            )
        except OSError as exc:
            ours.close()
            raise UserError(f"engine.python={python!r}: cannot start the vLLM worker: {exc}") from None
        finally:
            theirs.close()
        self.pid = self.proc.pid
        self._finalizer = weakref.finalize(self, _stop_process, self.proc)
        self.conn = Connection(ours.detach())
        self._pump = threading.Thread(target=self._pump_output, args=(forward_output,), daemon=True,
                                      name=f"vllm-worker-{self.pid}-output")
        self._pump.start()
        try:
            self.conn.send(dict(options))
        except OSError:
            pass  # the worker is already gone: _wait_ready reports why
        self.info = self._wait_ready(startup_timeout_s)
        self._reader = threading.Thread(target=self._read, daemon=True, name=f"vllm-worker-{self.pid}-reader")
        self._reader.start()
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()
        self._sender = threading.Thread(target=self._send_queued, daemon=True, name=f"vllm-worker-{self.pid}-sender")
        self._sender.start()

    # -- sending -------------------------------------------------------------------------------

    def new_key(self) -> int:
        return next(self._keys)

    def send(self, message: tuple) -> None:
        """Send one message (blocking); a dead worker raises :class:`WorkerError`."""
        if self.failure is not None:
            raise WorkerError(self.failure)
        try:
            with self._send_lock:
                self.conn.send(message)
                self.last_heard = max(self.last_heard, time.monotonic())
        except (OSError, ValueError):
            raise WorkerError(self._describe_death()) from None

    async def send_async(self, message: tuple) -> None:
        """Send without blocking the event loop (a big prompt list waits for the worker to read it).
        Messages go out in the order of the calls: one sender thread takes them from a queue."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future = loop.create_future()
        self._outbox.put((message, loop, done))
        await done

    def _send_queued(self) -> None:
        while (item := self._outbox.get()) is not None:
            message, loop, done = item
            error: BaseException | None = None
            try:
                self.send(message)
            except WorkerError as exc:
                error = exc
            try:
                loop.call_soon_threadsafe(settle, done, None, error)
            except RuntimeError:  # that event loop is closed
                pass

    # -- receiving -----------------------------------------------------------------------------

    def listen(self, key: int) -> asyncio.Queue:
        """Messages for ``key`` (and a ``DIED`` message if the worker dies), delivered on the
        caller's event loop. Call :meth:`forget` when done."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()

        def deliver(message: tuple) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, message)
            except RuntimeError:  # that event loop is closed: nobody is waiting any more
                pass

        with self._handlers_lock:
            self._handlers[key] = deliver
        if self.failure is not None:
            deliver((DIED, key, self.failure))
        return queue

    def forget(self, key: int) -> None:
        with self._handlers_lock:
            self._handlers.pop(key, None)

    async def receive(self, queue: asyncio.Queue, limit_s: float, doing: str) -> tuple:
        """The next message from ``queue``; if the worker sends nothing at all (not even a
        heartbeat) for ``limit_s`` seconds it is hung: it is killed and :class:`WorkerError` raised.
        A worker process that is stopped or gone is given up within seconds (:meth:`check_running`)."""
        while True:
            try:
                return await asyncio.wait_for(queue.get(), timeout=min(1.0, limit_s))
            except TimeoutError:
                self.check_running(doing)
                silent = time.monotonic() - self.last_heard
                if silent >= limit_s:
                    self.kill()
                    raise WorkerError(
                        f"vllm engine: the worker (pid {self.pid}) sent nothing for {silent:.0f} s while {doing} "
                        f"(engine.response_timeout_s = {limit_s:g}); it was stopped") from None

    async def call(self, message: tuple, doing: str = "waiting for its answer") -> tuple:
        """Send a message whose key (``message[1]``) gets exactly one answer, and return it; a
        worker process that is stopped or gone meanwhile raises :class:`WorkerError` within seconds."""
        key = message[1]
        queue = self.listen(key)
        try:
            await self.send_watched(message, doing)
            return await self.answer(queue, doing)
        finally:
            self.forget(key)

    async def send_watched(self, message: tuple, doing: str) -> None:
        """:meth:`send_async`, checking every second that the worker process is running (a
        stopped worker never reads, so the send itself may block)."""
        sending = asyncio.ensure_future(self.send_async(message))
        try:
            while not sending.done():
                await asyncio.wait({sending}, timeout=1.0)
                if not sending.done():
                    self.check_running(doing)
            await sending
        finally:
            sending.cancel()

    async def answer(self, queue: asyncio.Queue, doing: str) -> tuple:
        """The next message from ``queue``, checking every second that the worker process is running."""
        while True:
            try:
                return await asyncio.wait_for(queue.get(), timeout=1.0)
            except TimeoutError:
                self.check_running(doing)

    def check_running(self, doing: str) -> None:
        """Raise :class:`WorkerError` (after killing it) when the worker process has been stopped
        (SIGSTOP, a debugger) for :data:`STOPPED_GRACE_S`; a busy or sleeping worker passes. (A
        worker that exits is reported at once by the reader thread.)"""
        if not self._is_stopped():
            self._stopped_since = None
            return
        now = time.monotonic()
        if self._stopped_since is None:
            self._stopped_since = now
        if now - self._stopped_since < STOPPED_GRACE_S:
            return
        self.kill()
        raise WorkerError(
            f"vllm engine: the worker process (pid {self.pid}) has been stopped (SIGSTOP, or a debugger "
            f"holds it) for {now - self._stopped_since:.0f} s while {doing}; it was killed") from None

    def _is_stopped(self) -> bool:
        import psutil

        try:
            return self.proc.poll() is None and psutil.Process(self.pid).status() in _STOPPED
        except psutil.Error:  # gone meanwhile: the reader thread reports it
            return False

    # -- lifetime ------------------------------------------------------------------------------

    def close(self, timeout_s: float = 10.0) -> None:
        """Ask the worker to exit; kill it if it does not within ``timeout_s``."""
        if self.proc.poll() is None and self.failure is None:
            try:
                with self._send_lock:
                    self.conn.send((wire.SHUTDOWN, 0))
            except (OSError, ValueError):
                pass
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
        self.failure = self.failure or "the vLLM engine was closed"
        self._outbox.put(None)
        self.conn.close()
        self._finalizer.detach()

    def kill(self) -> None:
        _stop_process(self.proc)

    # -- internals -----------------------------------------------------------------------------

    def _wait_ready(self, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if self.conn.poll(0.2):
                    message = self.conn.recv()
                    if message[0] == wire.READY:
                        return message[2]
                    if message[0] == wire.FATAL:
                        self._fatal = message[2]
            except (EOFError, OSError):
                pass
            if self.proc.poll() is not None:
                self.proc.wait()
                self._pump.join(timeout=2.0)
                self.failure = self._describe_death()
                raise WorkerError(f"vllm engine: the worker failed to start: {self.failure}")
        self.kill()
        raise WorkerError(
            f"vllm engine: the worker (pid {self.pid}) was not ready within engine.startup_timeout_s = "
            f"{timeout_s:g} s; it was stopped.{self._tail_text()}"
        )

    def _read(self) -> None:
        while True:
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                break
            self.last_heard = time.monotonic()
            if message[0] == wire.FATAL:
                self._fatal = message[2]
                continue
            with self._handlers_lock:
                handler = self._handlers.get(message[1])
            if handler is not None:
                handler(message)
        if self.failure is None:  # not closed on purpose: the worker died
            try:
                self.proc.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                self.kill()
            self._pump.join(timeout=2.0)
            self.failure = self._describe_death()
        with self._handlers_lock:
            handlers = list(self._handlers.items())
        for key, handler in handlers:
            handler((DIED, key, self.failure))

    def _pump_output(self, forward: bool) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip()
            self.output_tail.append(line)
            if forward:
                print(f"[vllm worker] {line}", file=sys.stderr, flush=True)

    def _describe_death(self) -> str:
        code = self.proc.poll()
        how = "is not answering" if code is None else (
            f"was killed by signal {-code}" if code < 0 else f"exited with code {code}")
        text = f"the vLLM worker process (pid {self.pid}) {how}"
        if code == -9:
            return text + " (out of memory, or killed from outside)"
        if self._fatal:
            text += f"; its error: {self._fatal.strip().splitlines()[-1]}"
        return text + self._tail_text()

    def _tail_text(self) -> str:
        lines = [line for line in self.output_tail if line.strip()][-8:]
        return ("\n  last worker output:\n    " + "\n    ".join(lines)) if lines else ""


def _stop_process(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        try:
            proc.wait(timeout=10.0)
        except subprocess.TimeoutExpired:
            pass


def settle(future: asyncio.Future, result: Any, error: BaseException | None) -> None:
    """Complete ``future`` (on its event loop's thread) unless it was cancelled meanwhile."""
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def worker_environment(extra: Mapping[str, str]) -> dict[str, str]:
    """The worker's environment: ours, plus ``extra``."""
    env = dict(os.environ)
    env.update(extra)
    return env
