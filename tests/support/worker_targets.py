"""Targets of worker processes started in the tests of :mod:`grpo_run.core.processes` (a ``spawn``
child imports its target by name, so they live here, not in a test module)."""

from __future__ import annotations

import multiprocessing.connection
import os
import signal
import time

from grpo_run.core.processes import enter_worker


def echo(conn: multiprocessing.connection.Connection, parent_pid: int) -> None:
    """Answer each message with (message, SIGINT ignored?, parent pid as passed, own parent) until ``None``."""
    enter_worker(parent_pid)
    while (message := conn.recv()) is not None:
        conn.send((message, signal.getsignal(signal.SIGINT) == signal.SIG_IGN, parent_pid, os.getppid()))


def deaf(conn: multiprocessing.connection.Connection, parent_pid: int) -> None:
    """Never reads its pipe: only a kill ends it."""
    enter_worker(parent_pid)
    conn.send("up")
    while True:
        time.sleep(1)
