"""Environment code in worker processes: ``environment.isolation = "process"``.

:class:`IsolatedEnvironment` stands in for the environment in the trainer. It starts
``environment.workers`` worker processes, each building its own instance of the environment (and
its tools) from the class and config; ``reset`` picks the worker with the fewest open episodes, and
every later call of that episode (``step``, ``finish``, ``close``) goes to the same worker, which
runs one call at a time (``async def`` methods on an event loop of its own). What crosses is
pickled: rows, actions, ``EnvReset`` / ``EnvStep`` and the episode ``state``.

A worker whose resident memory is above ``environment.max_worker_rss_mb`` after a call takes no
new episode; a fresh one takes its place, and it is ended once its open episodes are closed -- the
scoring workers' rule (``scoring.max_worker_rss_mb``), kept from cutting episodes short. A call
over ``step_timeout_s`` kills its worker (the episodes open on it fail); a worker that dies is
replaced at the next ``reset``. Workers ignore SIGINT, die with the trainer (Linux
``PR_SET_PDEATHSIG``; both from :mod:`grpo_run.core.processes`) and, when ended, take the
processes they started along.

Hand-written on a ``multiprocessing`` pipe (started by the worker-process base,
:mod:`grpo_run.core.processes`) rather than on :class:`~grpo_run.core.placement.processes.
ProcessWorker`: that one imports torch in every child, ~300 MB a worker.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import multiprocessing.connection
import sys
import threading
from collections.abc import Mapping
from typing import Any

import attrs
import cloudpickle
import psutil

from grpo_run.core.plugins.episodes import EnvReset, EnvStep
from grpo_run.core.processes import enter_worker, start_worker
from grpo_run.core.rollout.env_processes import ENVIRONMENT, EnvironmentProcesses, kill_trees
from grpo_run.core.runlog import get_logger
from grpo_run.core.spawn import spawn_context

STARTUP_TIMEOUT_S = 120.0
"""How long a worker may take to import and build the environment."""


class WorkerCallError(Exception):
    """What an environment call raised in its worker (its type and message), or why the worker failed."""


@attrs.frozen
class _Pinned:
    """An episode's state in the trainer: the worker that holds the episode, and its own state."""

    worker: _Worker
    state: Any


class IsolatedEnvironment:
    """The environment ``env_cls(config, tools)``, run in worker processes (see the module docstring)."""

    def __init__(self, env_cls: type, config: Any, tool_specs: Mapping[str, tuple[type, Any]], *, workers: int,
                 max_rss_mb: int, timeout_s: float, processes: EnvironmentProcesses) -> None:
        self.name = env_cls.name  # type: ignore[attr-defined]
        self.Config = env_cls.Config  # type: ignore[attr-defined]
        self._blob = cloudpickle.dumps((env_cls, config, dict(tool_specs)))
        self._has = {m: callable(getattr(env_cls, m, None)) for m in ("finish", "close")}
        if not self._has["finish"]:
            self.finish = None  # the runner adds no final reward
        self._max_rss = max_rss_mb << 20
        self._timeout_s = timeout_s
        self._processes = processes
        self._slots: list[_Worker | None] = [None] * workers
        self._retired: list[_Worker] = []
        self._lock = threading.Lock()
        self._replaced = 0
        # Workers are started from one long-lived thread: PR_SET_PDEATHSIG follows the starting thread.
        self._starter = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="env-worker-start")
        try:
            for i in range(workers):  # at build time: a class that cannot be built is said at once
                self._slots[i] = self._start(i)
        except BaseException:
            self.shutdown()
            raise

    # -- the environment contract --------------------------------------------------------------

    def reset(self, row: Mapping[str, Any], seed: int) -> Any:
        worker = self._pick()
        try:
            reset = worker.call("reset", (row, seed), self._timeout_s, self._processes)
        except BaseException:
            self._leave(worker)
            raise
        if not isinstance(reset, EnvReset):
            self._leave(worker)  # the runner drops the episode without closing it
            return reset
        self._check_memory(worker)
        return attrs.evolve(reset, state=_Pinned(worker, reset.state))

    def step(self, state: _Pinned, action: Any) -> Any:
        step = state.worker.call("step", (state.state, action), self._timeout_s, self._processes)
        self._check_memory(state.worker)
        if isinstance(step, EnvStep) and step.state is not None:
            step = attrs.evolve(step, state=_Pinned(state.worker, step.state))
        return step

    def finish(self, state: _Pinned) -> Any:  # type: ignore[no-redef]
        return state.worker.call("finish", (state.state,), self._timeout_s, self._processes)

    def close(self, state: Any = None) -> None:
        """The episode's ``close`` (in its worker); the runner calls it once per episode reset."""
        if not isinstance(state, _Pinned):  # the runner's own close() of the whole environment
            return
        try:
            if self._has["close"]:
                state.worker.call("close", (state.state,), self._timeout_s, self._processes)
        finally:
            self._leave(state.worker)

    def shutdown(self) -> None:
        """End every worker and what it started (the run is over)."""
        with self._lock:
            workers = [w for w in [*self._slots, *self._retired] if w is not None]
            self._slots = [None] * len(self._slots)
            self._retired = []
        for worker in workers:
            worker.end()
        self._starter.shutdown(wait=False)

    # -- workers -------------------------------------------------------------------------------

    def _start(self, slot: int) -> _Worker:
        worker = self._starter.submit(_Worker, f"grpo-run-env-{slot}", self._blob).result()
        try:
            worker.wait_ready()
        except BaseException:
            worker.end()
            raise
        self._processes.adopt_children_of(worker.pid, ENVIRONMENT)  # what its constructor started
        return worker

    def _pick(self) -> _Worker:
        with self._lock:
            gone = [w for w in self._slots if w is not None and not w.alive()]  # died, or killed on a timeout
            self._slots = [None if w in gone else w for w in self._slots]
            missing = [i for i, w in enumerate(self._slots) if w is None]
        for worker in gone:
            worker.end()
        for i in missing:  # outside the lock: a start takes seconds
            worker = self._start(i)
            with self._lock:
                if self._slots[i] is None:
                    self._slots[i] = worker
                    continue
            worker.end()
        with self._lock:
            worker = min((w for w in self._slots if w is not None), key=lambda w: w.open)
            worker.open += 1
            return worker

    def _leave(self, worker: _Worker) -> None:
        with self._lock:
            worker.open -= 1
            done = worker.retired and worker.open <= 0
            if done:
                self._retired.remove(worker)
        if done:
            worker.end()

    def _check_memory(self, worker: _Worker) -> None:
        if not self._max_rss or worker.retired:
            return
        rss = worker.rss()
        if rss <= self._max_rss:
            return
        with self._lock:
            if worker.retired or worker not in self._slots:
                return
            worker.retired = True
            self._slots[self._slots.index(worker)] = None  # the next reset starts a fresh one
            self._retired.append(worker)
            self._replaced += 1
            first, open_ = self._replaced == 1, worker.open
        text = (f"environment {self.name!r}: worker pid {worker.pid} holds {rss / 2**20:.0f} MB, over "
                f"environment.max_worker_rss_mb = {self._max_rss >> 20}; it takes no new episode and is ended "
                f"once its {open_} open one(s) are closed (a fresh worker takes its place)")
        get_logger().warning("environment_worker_replaced", message=text, replaced=self._replaced)
        if first and self._processes.warn is not None:
            self._processes.warn(text + "; later replacements are only logged")


class _Worker:
    """One worker process and its pipe; calls are sent one at a time (``lock``)."""

    def __init__(self, name: str, blob: bytes) -> None:
        self.process, self.conn = start_worker(spawn_context(), _serve, (blob, list(sys.path)), name)
        self.pid: int = self.process.pid
        self.lock = threading.Lock()
        self.open = 0
        """Episodes reset on it and not yet closed."""
        self.retired = False
        self._dead: str | None = None

    def wait_ready(self) -> None:
        ok, detail = self._receive(STARTUP_TIMEOUT_S, "starting")
        if not ok:
            raise WorkerCallError(f"an environment worker could not build the environment: {detail}")

    def alive(self) -> bool:
        return self._dead is None and self.process.is_alive()

    def call(self, method: str, args: tuple, timeout_s: float, processes: EnvironmentProcesses) -> Any:
        if not self.lock.acquire(timeout=timeout_s):
            raise TimeoutError(f"its worker (pid {self.pid}) was busy for {timeout_s:g} s")
        try:
            if self._dead is not None:
                raise WorkerCallError(self._dead)
            try:
                self.conn.send((method, args))
            except Exception as exc:  # an argument that cannot be pickled, or a closed pipe
                raise WorkerCallError(f"could not be sent to its worker: {type(exc).__name__}: {exc}") from None
            ok, value = self._receive(timeout_s, method)
        finally:
            self.lock.release()
            processes.adopt_children_of(self.pid)  # what the call started: the current episode's
        if not ok:
            raise WorkerCallError(value)
        return value

    def _receive(self, timeout_s: float, what: str) -> tuple[bool, Any]:
        try:
            if self.conn.poll(timeout_s):
                return self.conn.recv()
        except (EOFError, OSError):
            self.process.join(1.0)
            code = self.process.exitcode
            self._dead = f"the environment worker (pid {self.pid}) died (exit code {code})"
            return False, self._dead
        except Exception as exc:  # a result that cannot be unpickled here
            return False, f"returned something that cannot be read back: {type(exc).__name__}: {exc}"
        self._dead = f"the environment worker (pid {self.pid}) was killed: {what} ran past {timeout_s:g} s"
        self.end()
        raise TimeoutError(f"{what} ran longer than {timeout_s:g} s in its worker (pid {self.pid}, now killed)")

    def rss(self) -> int:
        try:
            return int(psutil.Process(self.pid).memory_info().rss)
        except psutil.Error:
            return 0

    def end(self) -> None:
        """Kill the worker and every process it started, and reap it."""
        self._dead = self._dead or f"the environment worker (pid {self.pid}) was ended"
        try:
            procs = [psutil.Process(self.pid)]
        except psutil.Error:
            procs = []
        kill_trees(procs)
        self.process.join(5.0)
        self.conn.close()


def _serve(conn: multiprocessing.connection.Connection, blob: bytes, sys_path: list[str], parent_pid: int) -> None:
    """A worker: build the environment, then answer ``(method, args)`` until the pipe closes."""
    enter_worker(parent_pid)  # Ctrl-C is the trainer's to handle
    sys.path[:0] = [p for p in sys_path if p not in sys.path]  # import-path environments, PYTHONPATH
    try:
        env_cls, config, tool_specs = cloudpickle.loads(blob)
        env = env_cls(config, {name: cls(conf) for name, (cls, conf) in tool_specs.items()})
    except BaseException as exc:
        conn.send((False, f"{type(exc).__name__}: {exc}"))
        return
    conn.send((True, None))
    loop: asyncio.AbstractEventLoop | None = None
    while True:
        try:
            method, args = conn.recv()
        except (EOFError, OSError, TypeError, ValueError):
            return
        try:
            result = getattr(env, method)(*args)
            if inspect.isawaitable(result):
                loop = loop or asyncio.new_event_loop()
                result = loop.run_until_complete(result)
            reply: tuple[bool, Any] = (True, result)
        except BaseException as exc:  # SystemExit and KeyboardInterrupt too: that call's error
            reply = (False, f"{type(exc).__name__}: {exc}")
        try:
            conn.send(reply)
        except Exception as exc:
            conn.send((False, f"returned something that cannot be sent back: {type(exc).__name__}: {exc}"))
