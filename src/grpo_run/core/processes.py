"""The worker-process base: what every worker process grpo-run starts has in common.

Three kinds share it: the scoring workers (:mod:`grpo_run.core.scoring.worker_process`), the
environment workers (:mod:`grpo_run.core.rollout.env_worker`) and the placement processes
(:mod:`grpo_run.core.placement.processes`). Each is a daemon ``spawn`` child (one that never
re-runs the user's ``__main__``, :mod:`grpo_run.core.spawn`) joined to its parent by one
``multiprocessing`` pipe; its target takes the child's end of the pipe first and the parent's pid
last. In the child, :func:`enter_worker` comes first: the child ignores SIGINT (Ctrl-C is the
parent's to handle: it decides whether to save and stop) and dies with its parent (Linux
``PR_SET_PDEATHSIG``, so not even a SIGKILL of the trainer leaves it behind). The kernel ties that
to the *thread* that started the child: start workers from a thread that lives as long as they
should. A worker is asked to stop with ``None`` down its pipe and killed when it has not.

This module imports none of the rooms that use it, and not torch.
"""

from __future__ import annotations

import ctypes
import multiprocessing.connection
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

_PR_SET_PDEATHSIG = 1


def start_worker(
    ctx: Any, target: Callable[..., None], args: Sequence[Any], name: str
) -> tuple[Any, multiprocessing.connection.Connection]:
    """Start ``target(child_conn, *args, parent_pid)`` in a daemon process of ``ctx`` (a
    :func:`~grpo_run.core.spawn.spawn_context`); returns the process and the parent's end of the pipe."""
    parent_conn, child_conn = ctx.Pipe()
    process = ctx.Process(target=target, args=(child_conn, *args, os.getpid()), name=name, daemon=True)
    process.start()  # never re-runs the user's __main__ (see grpo_run.core.spawn)
    child_conn.close()
    return process, parent_conn


def enter_worker(parent_pid: int) -> None:
    """The first thing a worker process does: ignore SIGINT and die with its parent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    die_with_parent(parent_pid)


def die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGKILL this process when its parent dies (even by SIGKILL): no orphans."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # no prctl here: the parent still reaps us on a clean exit
            pass
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(1)


def ask_to_exit(conn: multiprocessing.connection.Connection | None) -> None:
    """Send the worker ``None`` (finish and exit); a pipe that is already closed or broken is fine."""
    try:
        if conn is not None:
            conn.send(None)
    except (OSError, ValueError):
        pass


def kill_worker(process: Any) -> int | None:
    """Kill the process if it is still running and reap it; returns its exit code."""
    if process.is_alive():
        process.kill()
    process.join()
    return process.exitcode


def stop_worker(process: Any, conn: multiprocessing.connection.Connection | None, grace_s: float) -> None:
    """Ask the worker to exit, kill it if it has not within ``grace_s``, and reap it."""
    ask_to_exit(conn)
    process.join(grace_s)
    kill_worker(process)
