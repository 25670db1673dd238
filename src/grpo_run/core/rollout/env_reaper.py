"""A small process that ends what environment code started when the trainer is killed outright.

:class:`~grpo_run.core.rollout.env_processes.EnvironmentProcesses` ends the processes environment
code starts: at each episode's end, and at the run's end, after ``run stopped`` or after a signal.
A SIGKILL of the trainer (the OOM killer, ``kill -9``, a scheduler past its grace period) runs no
clean-up code, and those processes used to be left running. So the first time environment code is
seen to start a process, the trainer starts this reaper (:class:`Reaper`), the way a run that
started Ray starts :mod:`grpo_run.core.placement.ray_watcher`. Over its stdin the trainer tells it
which processes (pid and start time) are the environment's and alive. When the trainer is gone
without saying goodbye (end of file without ``q``, or a new parent pid: a child that environment
code forked may still hold the pipe open), the reaper SIGKILLs each of them and its descendants,
then exits. After a normal end the trainer has ended them itself and says ``q``: it exits at once.

It ignores SIGINT and SIGTERM (a Ctrl-C reaches the whole foreground process group; the trainer's
own handling decides what ends). Processes are known from the end of the call that started them:
one started by a call still running when the trainer is killed is not covered.

Run as ``python -P .../env_reaper.py PARENT_PID`` (by path: it imports only psutil, not grpo_run).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading

import psutil

Key = tuple[int, float]
POLL_S = 0.5
_PIDS: set[int] = set()
"""Every reaper this process started: never taken for an environment's process (Linux hands the
children of a thread that exits to another thread, where an open ``async def`` call may see one)."""


def is_reaper(pid: int) -> bool:
    return pid in _PIDS


class Reaper:
    """The reaper process of one run's environment, started on the first :meth:`add`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._failed = False

    def add(self, keys: list[Key]) -> None:
        """``keys`` are the environment's processes: end them if the trainer is killed."""
        if keys:
            self._send(b"".join(b"+ %d %r\n" % key for key in keys), start=True)

    def discard(self, keys: list[Key]) -> None:
        """``keys`` were ended (or are no longer the environment's)."""
        if keys:
            self._send(b"".join(b"- %d %r\n" % key for key in keys), start=False)

    def close(self) -> None:
        """The run ended its processes itself: the reaper exits without ending any."""
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            assert proc.stdin is not None
            proc.stdin.write(b"q\n")
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        _PIDS.discard(proc.pid)

    def _send(self, data: bytes, start: bool) -> None:
        with self._lock:
            if self._proc is None:
                if not start or self._failed:
                    return
                self._start()
            proc = self._proc
            if proc is None or proc.stdin is None:
                return
            try:
                proc.stdin.write(data)
                proc.stdin.flush()
            except OSError as exc:  # it died (say, killed with the process group): nothing to tell
                self._proc, self._failed = None, True
                _warn("environment_reaper_gone", exc)

    def _start(self) -> None:
        try:
            # -P: this module's directory stays off sys.path (run by path, it imports only psutil).
            self._proc = subprocess.Popen(
                [sys.executable, "-P", os.path.abspath(__file__), str(os.getpid())], stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True,
            )
        except OSError as exc:  # no process to spare: the run goes on, ending them at its end as before
            self._failed = True
            _warn("environment_reaper_not_started", exc)
            return
        _PIDS.add(self._proc.pid)


def _warn(event: str, exc: BaseException) -> None:
    from grpo_run.core.runlog import get_logger

    get_logger().warning(event, error=f"{type(exc).__name__}: {exc}")


def _follow(parent: int) -> None:
    """Read ``+ pid ctime`` / ``- pid ctime`` lines until ``q`` (return), or until the parent is
    gone (end of file, or a new parent): then kill what is still listed."""
    known: set[Key] = set()
    stdin, pending = sys.stdin.buffer.fileno(), b""
    while True:
        if not select.select([stdin], [], [], POLL_S)[0]:
            if os.getppid() != parent:  # checked only with nothing left to read: all it said counts
                break
            continue
        data = os.read(stdin, 1 << 16)
        if not data:
            break
        pending += data
        *lines, pending = pending.split(b"\n")
        for line in lines:
            op, _, rest = line.partition(b" ")
            if op == b"q":
                return
            pid, created = rest.split()
            (known.add if op == b"+" else known.discard)((int(pid), float(created)))
    victims: dict[int, psutil.Process] = {}
    for pid, created in known:
        try:
            proc = psutil.Process(pid)
            if abs(proc.create_time() - created) > 0.01:
                continue  # the pid went to another process
            for member in [proc, *proc.children(recursive=True)]:
                victims.setdefault(member.pid, member)
        except psutil.Error:
            continue
    for proc in victims.values():
        try:
            proc.kill()
        except psutil.Error:
            continue


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the trainer's to handle
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _follow(int(sys.argv[1]))
