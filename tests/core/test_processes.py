"""The worker-process base: a started worker gets its pipe and its parent's pid, ignores SIGINT,
exits when sent ``None`` and is killed when it does not within the grace time."""

from __future__ import annotations

import os
import signal

from support import worker_targets

from grpo_run.core.processes import kill_worker, start_worker, stop_worker
from grpo_run.core.spawn import spawn_context


def test_a_worker_is_set_up_and_exits_when_asked() -> None:
    process, conn = start_worker(spawn_context(), worker_targets.echo, (), "grpo-run-test-echo")
    assert process.daemon and process.name == "grpo-run-test-echo"
    conn.send("hello")
    assert conn.poll(60)
    assert conn.recv() == ("hello", True, os.getpid(), os.getpid())
    stop_worker(process, conn, grace_s=30.0)
    assert process.exitcode == 0  # it left its loop on None: not killed


def test_a_worker_that_does_not_exit_is_killed_after_the_grace_time() -> None:
    process, conn = start_worker(spawn_context(), worker_targets.deaf, (), "grpo-run-test-deaf")
    assert conn.poll(60) and conn.recv() == "up"
    stop_worker(process, conn, grace_s=0.2)
    assert process.exitcode == -signal.SIGKILL
    assert kill_worker(process) == -signal.SIGKILL  # an ended worker: only its exit code
