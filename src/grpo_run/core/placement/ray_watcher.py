"""Takes a local Ray instance down with the run that started it, however the run ends.

``ray.init`` on Linux ties its own node processes (GCS, raylet, ...) to the driver with
``PR_SET_PDEATHSIG``, but the agents the raylet starts (``ray::DashboardAgent``,
``ray::RuntimeEnvAgent``) and the workers are its children, not the driver's: after a SIGKILL of
the driver they live on. So a run that started Ray also starts this small watcher
(:func:`start_watcher`): a process that follows the node processes it is given and, every
second, their descendants (remembering each by pid and start time, so a reused pid is never
touched), and reads its stdin. The driver holds the other end of that pipe; when the driver
exits -- normally, by an exception, by SIGKILL -- the pipe closes, and the watcher kills every
process it remembers that is still alive, then exits. Only the processes of this run's Ray
instance are ever touched: other Ray instances on the machine are not descendants of them.

Run as ``python .../ray_watcher.py PID...`` (by path: it imports only psutil, not grpo_run).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from collections.abc import Sequence
from typing import IO

import psutil

POLL_S = 1.0


def _follow(roots: Sequence[int]) -> None:
    known: dict[int, float] = {}  # pid -> create_time

    def refresh() -> None:
        # Children of every process seen so far: an agent whose raylet has died is still found.
        for pid in [*roots, *known]:
            try:
                proc = psutil.Process(pid)
                if pid in known and proc.create_time() != known[pid]:
                    continue  # the pid went to another process
                family = [proc, *proc.children(recursive=True)]
            except psutil.Error:
                continue
            for member in family:
                try:
                    known.setdefault(member.pid, member.create_time())
                except psutil.Error:
                    continue

    stdin = sys.stdin.buffer
    refresh()
    while True:
        ready, _, _ = select.select([stdin], [], [], POLL_S)
        if ready and not os.read(stdin.fileno(), 4096):  # EOF: the driver is gone or done
            break
        refresh()
    _kill(known)


def _kill(known: dict[int, float]) -> None:
    victims = []
    for pid, created in known.items():
        try:
            proc = psutil.Process(pid)
            if proc.create_time() == created:
                victims.append(proc)
        except psutil.Error:
            continue
    for proc in victims:
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.Error:
            continue
    psutil.wait_procs(victims, timeout=5.0)


def start_watcher(roots: Sequence[int]) -> subprocess.Popen[bytes]:
    """Start the watcher of ``roots`` (pids of Ray's node processes); it acts when the returned
    process's stdin closes (:func:`stop_watcher`, or this process dying)."""
    return subprocess.Popen(
        # -P: this directory is not put on sys.path (its select.py would hide the standard one).
        [sys.executable, "-P", os.path.abspath(__file__), *map(str, roots)], stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True,
    )


def stop_watcher(watcher: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    """Close the watcher's pipe (it kills what of Ray is left) and wait for it."""
    stdin: IO[bytes] | None = watcher.stdin
    if stdin is not None:
        stdin.close()
    try:
        watcher.wait(timeout_s)
    except subprocess.TimeoutExpired:
        watcher.kill()
        watcher.wait()


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle
    _follow([int(arg) for arg in sys.argv[1:]])
