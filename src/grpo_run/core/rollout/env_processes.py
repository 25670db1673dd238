"""The processes environment code starts, ended when nothing needs them any more.

Environment code runs in the trainer process, so a ``subprocess.Popen`` in a ``step`` makes a
child of the trainer, beside the trainer's own: scoring workers, learner ranks, engine servers,
Ray. Only what environment code started may be ended, so processes are attributed by the thread
that started them, which Linux records (``/proc/self/task/<tid>/children``):

* a plain ``reset``/``step``/``finish``/``close`` runs on a thread of the environment pool; the
  children of that thread still alive when the call returns are the episode's (a pool thread
  runs one call at a time, and nothing else runs on it);
* an ``async def`` call, or ``run_episode``, runs on the event loop's thread: the children that
  thread gained during the call are the episode's (and, when calls of several episodes overlapped
  there, each of theirs: such a child lives until all of them are over);
* the environment's (and its tools') constructor runs on the thread that builds the run: the
  children it gained meanwhile are the environment's, for the whole run;
* with ``environment.isolation = "process"`` (:mod:`.env_worker`) a worker runs one call at a
  time: its new children after a call are that call's episode's (:meth:`adopt_children_of`).

An episode's processes, with every descendant seen of them, are ended (SIGKILL, then reaped)
once the episode is over -- after its ``close`` -- and the run says so once; a process that
should serve many episodes belongs in the constructor. Everything left (the environment's own,
those of a call that never returned) is ended by :meth:`EnvironmentProcesses.close`, when the
run closes its parts: at its normal end, after ``run stopped``, after a first SIGINT/SIGTERM.
A second signal kills every child of the trainer anyway (:mod:`grpo_run.core.loop.signals`).

A SIGKILL of the trainer runs no clean-up code: a reaper process (:mod:`.env_reaper`), started
the first time environment code is seen to start one, ends what is known then. Not covered: a
process that leaves the tree before it is seen (double-forked daemons), children of threads the
environment starts itself, and, under a SIGKILL, what a call still running had started.
psutil does the process work; the thread attribution is Linux's (elsewhere nothing is tracked).

Memory: environment code shares the trainer's heap, so what it keeps is not told apart from the
trainer's own. What can be said is how much the trainer's resident memory grew *while plain
environment calls ran* (each call's growth above the largest size seen before, summed):
the run says so when that passes :data:`MEMORY_WARNING_MB`, and again at every doubling, while it
happens. Growth in the same moments from elsewhere (a first large generation) counts too, so the
line says what was measured, not whom to blame. A bound takes worker processes (:mod:`.env_worker`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import psutil

from grpo_run.core.rollout.env_reaper import Reaper, is_reaper
from grpo_run.core.runlog import get_logger

T = TypeVar("T")
Key = tuple[int, float]
"""A process by pid and start time (a pid reused by another process is never touched)."""
MEMORY_WARNING_MB = 256
"""Growth of the trainer's memory during environment calls that is first said (then 2x, 4x, ...)."""
_CLOCK_SLACK_S = 0.05
"""Process start times are counted in clock ticks (10 ms): a margin for the comparison."""
ENVIRONMENT = "the environment"
"""Owner of the processes the constructor started: ended only at :meth:`EnvironmentProcesses.close`."""


class EpisodeOwner:
    """The owner of one episode's processes (a fresh one per episode)."""

    __slots__ = ("__weakref__",)


class EnvironmentProcesses:
    """The processes of one environment's code, by owner (an :class:`EpisodeOwner`, or
    :data:`ENVIRONMENT`), and the trainer's memory growth during its calls."""

    def __init__(self, env_name: str) -> None:
        self.env_name = env_name
        self.ended = 0
        """Processes ended so far (episodes' and, after :meth:`close`, the environment's)."""
        self._owners: dict[Key, set[Any]] = {}
        self._procs: dict[Key, psutil.Process] = {}
        self._threads: set[int] = set()
        self._windows: list[tuple[int, Any, frozenset[int]]] = []
        """Open :meth:`watching` blocks: (thread, owner, that thread's children when it opened)."""
        self._over: weakref.WeakSet[EpisodeOwner] = weakref.WeakSet()
        """Episodes already ended: what a call of theirs that returns late started is ended at once."""
        self._lock = threading.Lock()
        self._told = False
        self.grown_bytes = 0
        """Growth of the trainer's resident memory during plain environment calls, summed."""
        self._next_warning = MEMORY_WARNING_MB << 20
        self._me = psutil.Process()
        self._peak = 0
        self._local = threading.local()
        self._at_close: list[Callable[[], None]] = []
        self._reaper = Reaper()
        # Dropped without close() (a test, an abandoned build): the reaper goes too. Not at exit:
        # there it is what ends the processes close() was not called for.
        weakref.finalize(self, self._reaper.close).atexit = False
        self.warn: Callable[[str], None] | None = None
        """Shows the lines about ended processes and memory on the console (the log has them anyway)."""

    # -- attribution -------------------------------------------------------------------------

    @contextlib.contextmanager
    def constructing(self) -> Iterator[None]:
        """The block builds the environment: children this thread gains in it are the environment's."""
        with self.watching(ENVIRONMENT):
            yield

    @contextlib.contextmanager
    def watching(self, owner: Any) -> Iterator[None]:
        """Children the current thread gains during the block belong to ``owner`` (the event
        loop's thread around an ``async def`` call, the building thread around a constructor).

        Blocks of several episodes overlap on the event loop's thread: a child that appeared while
        more than one was open belongs to each of them, and is ended only when all have ended."""
        tid = threading.get_native_id()
        opened = _process_clock() - _CLOCK_SLACK_S
        window = (tid, owner, frozenset(_thread_children(tid)))
        with self._lock:
            self._windows.append(window)
        try:
            yield
        finally:
            with self._lock:
                self._windows.remove(window)
                others = [(o, before) for t, o, before in self._windows if t == tid]
            new = [pid for pid in _thread_children(tid) if pid not in window[2] and _started_after(pid, opened)]
            for pid in new:
                self._adopt({owner, *(o for o, before in others if pid not in before)}, [pid], shared=True)

    def on_thread(self, owner: Any, fn: Callable[..., T]) -> Callable[..., T]:
        """``fn`` for a pool thread: afterwards, that thread's children not yet known are ``owner``'s."""

        @functools.wraps(fn)
        def call(*args: Any) -> T:
            tid = threading.get_native_id()
            with self._lock:
                self._threads.add(tid)
            before = self._rss()
            self._local.owner = owner
            try:
                return fn(*args)
            finally:
                self._local.owner = None
                self._grew(before, self._rss())
                self._adopt({owner}, _thread_children(tid))

        return call

    def adopt_children_of(self, pid: int | None, owner: Any = None) -> None:
        """Children of ``pid`` (an environment worker process) not yet known are ``owner``'s, by
        default the owner of the call running on this thread (:meth:`on_thread`)."""
        if pid is None:
            return
        owner = owner if owner is not None else getattr(self._local, "owner", None)
        try:
            children = [child.pid for child in psutil.Process(pid).children()]
        except psutil.Error:
            return
        self._adopt({owner}, children)

    def at_close(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` first when :meth:`close` is called (environment workers are ended there)."""
        self._at_close.append(fn)

    def _rss(self) -> int:
        try:
            return int(self._me.memory_info().rss)
        except psutil.Error:
            return 0

    def _grew(self, before: int, after: int) -> None:
        """Count the part of a call's growth above every resident size seen at a call's end so far
        (concurrent calls see each other's growth: it is counted once)."""
        with self._lock:
            counted = after - max(before, self._peak)
            self._peak = max(self._peak, after)
            if counted <= 0:
                return
            self.grown_bytes += counted
            if self.grown_bytes < self._next_warning:
                return
            while self._next_warning <= self.grown_bytes:
                self._next_warning *= 2
            grown = self.grown_bytes
        text = (f"the trainer's memory grew by {grown / 2**20:.0f} MB while environment {self.env_name!r} ran "
                f"its calls (resident now {self._rss() / 2**30:.1f} GB); environment code runs in the trainer, "
                f"so what it keeps between episodes is never given back")
        get_logger().warning("environment_memory", message=text, grown_mb=round(grown / 2**20, 1))
        if self.warn is not None:
            self.warn(text)

    def _adopt(self, owners: set[Any], pids: list[int], shared: bool = False) -> None:
        """Record ``pids`` and their descendants as ``owners``'; one already known keeps its
        owners, or (``shared``: seen in overlapping blocks) gains these."""
        found = []
        for pid in pids:
            if is_reaper(pid):  # the trainer's own helper, whichever thread started it
                continue
            try:
                proc = psutil.Process(pid)
                found += [proc, *proc.children(recursive=True)]
            except psutil.Error:
                continue
        new = []
        with self._lock:
            for proc in found:
                try:
                    key = (proc.pid, proc.create_time())
                except psutil.Error:
                    continue
                if key not in self._owners:  # first seen: its owners; seen again from a pool thread: known
                    self._owners[key] = set(owners)
                    self._procs[key] = proc
                    new.append(key)
                elif shared:
                    self._owners[key] |= owners
            late = [o for o in owners if isinstance(o, EpisodeOwner) and o in self._over]
        self._reaper.add(new)
        for owner in late:  # an abandoned call (its episode timed out) returned after all
            self.end(owner)

    # -- ending ------------------------------------------------------------------------------

    def end(self, owner: Any) -> int:
        """End the processes ``owner`` started (and their descendants); returns how many were alive."""
        with self._lock:
            if isinstance(owner, EpisodeOwner):
                self._over.add(owner)
            keys = []
            for key, owners in self._owners.items():
                owners.discard(owner)
                if not owners:  # no episode that may still need it is left
                    keys.append(key)
            for key in keys:
                del self._owners[key]
            procs = [self._procs.pop(k) for k in keys]
        if not procs:
            return 0
        what = _command(procs[0])
        ended = kill_trees(procs)
        self._reaper.discard(keys)
        with self._lock:
            self.ended += ended
        if ended and owner is not ENVIRONMENT and not self._told:
            self._told = True
            text = (f"environment {self.env_name!r} left {ended} process(es) running after an episode ({what}); "
                    f"ended them, as every process an episode starts is once the episode is over (start one "
                    f"that serves many episodes in the environment's __init__: it lives until the run ends)")
            get_logger().warning("environment_processes_ended", message=text)
            if self.warn is not None:
                self.warn(text)
        return ended

    def close(self) -> int:
        """End every process left: the environment's own, any episode's, and the children of pool
        threads whose call never returned. Returns how many were alive."""
        for fn in self._at_close:
            try:
                fn()
            except Exception as exc:  # closing: report, end the rest anyway
                get_logger().warning("close_failed", error=f"{type(exc).__name__}: {exc}")
        self._at_close.clear()
        with self._lock:
            threads = sorted(self._threads)
        for tid in threads:  # a hung call's thread: whatever it started is the environment's
            self._adopt({ENVIRONMENT}, _thread_children(tid))
        with self._lock:
            procs = list(self._procs.values())
            self._owners.clear()
            self._procs.clear()
        ended = kill_trees(procs)
        self._reaper.close()
        with self._lock:
            self.ended += ended
        if self.ended or self.grown_bytes:
            get_logger().info("environment_processes", environment=self.env_name, ended=self.ended,
                              memory_grown_mb=round(self.grown_bytes / 2**20, 1))
        return ended


def _process_clock() -> float:
    """Now, on the clock of ``psutil.Process.create_time`` (boot time + time since boot: its boot
    time is whole seconds, so ``time.time()`` may be up to a second ahead of it)."""
    try:
        return psutil.boot_time() + time.clock_gettime(time.CLOCK_BOOTTIME)
    except (AttributeError, OSError):  # no CLOCK_BOOTTIME: children are not tracked there anyway
        return 0.0


def _started_after(pid: int, when: float) -> bool:
    """Whether ``pid`` started after ``when``: a process an exiting thread handed over to this one
    (Linux moves a thread's children to another of the process) is older and not the call's."""
    try:
        return psutil.Process(pid).create_time() >= when
    except psutil.Error:
        return False


def _thread_children(tid: int) -> list[int]:
    """Pids of the live children the thread ``tid`` of this process started (Linux; else none)."""
    try:
        with open(f"/proc/{os.getpid()}/task/{tid}/children", encoding="ascii") as fh:
            return [int(pid) for pid in fh.read().split()]
    except (OSError, ValueError):
        return []


def kill_trees(procs: list[psutil.Process]) -> int:
    """SIGKILL ``procs`` and every descendant of theirs still alive, then reap them; how many were alive."""
    victims: dict[int, psutil.Process] = {}
    for proc in procs:
        try:
            if not proc.is_running():  # gone, or its pid now belongs to another process
                continue
            for member in [proc, *proc.children(recursive=True)]:
                victims.setdefault(member.pid, member)
        except psutil.Error:
            continue
    alive = []
    for proc in victims.values():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
            proc.kill()
        except psutil.Error:
            continue
    # Reap the trainer's own children (never wait on the others: a killed grandchild stays a
    # zombie until whoever adopts it reaps it, and waiting for that would stall the event loop).
    own = []
    for proc in victims.values():
        try:
            if proc.ppid() == os.getpid():
                own.append(proc)
        except psutil.Error:
            continue
    psutil.wait_procs(own, timeout=1.0)
    return len(alive)


def _command(proc: psutil.Process) -> str:
    try:
        return f"pid {proc.pid}: " + (" ".join(proc.cmdline())[:80] or proc.name())
    except psutil.Error:
        return "?"
