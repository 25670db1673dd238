"""Local worker processes: calls in order, errors and deaths reported through futures, SIGINT
ignored, threads set, no orphan when the parent dies."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from support.served import Served

from grpo_run.core.placement.processes import ProcessWorker, RemoteError, WorkerDied


@pytest.fixture(scope="module")
def worker():
    w = ProcessWorker("test worker", functools.partial(Served, 10), threads=3)
    w.start()
    yield w
    w.close(grace_s=5)


def test_calls_return_results_in_order_and_the_child_is_set_up(worker) -> None:
    futures = [worker.submit("add", i) for i in range(5)]
    assert [f.result(timeout=60) for f in futures] == [10, 11, 12, 13, 14]
    assert worker.submit("pid").result(timeout=10) == worker.pid != os.getpid()
    assert worker.submit("sigint_disposition").result(timeout=10) is True  # Ctrl-C is the parent's
    assert worker.submit("threads").result(timeout=10) == "3"


def test_errors_come_back_as_themselves_with_the_remote_traceback(worker) -> None:
    with pytest.raises(KeyError, match="no such row") as info:
        worker.submit("fail").result(timeout=60)
    assert any(note.startswith("in test worker:") and 'raise KeyError("no such row")' in note for note in info.value.__notes__)
    with pytest.raises(RemoteError, match="unpicklable returned something that cannot be sent"):
        worker.submit("unpicklable").result(timeout=10)
    assert worker.submit("add", 1).result(timeout=10) == 11  # still serving


def test_a_killed_worker_fails_its_pending_call_at_once() -> None:
    worker = ProcessWorker("test worker", functools.partial(Served, 10))
    worker.start()
    assert worker.submit("add", 0).result(timeout=60) == 10
    pending = worker.submit("sleep", 60)
    os.kill(worker.pid, signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(WorkerDied, match=rf"test worker \(pid {worker.pid}, killed by SIGKILL\) died"):
        pending.result(timeout=30)
    assert time.monotonic() - start < 5
    with pytest.raises(WorkerDied, match="is not running"):
        worker.submit("add", 1).result(timeout=5)


def test_workers_die_with_their_parent(tmp_path) -> None:
    # A parent process starts a worker, prints its pid and is killed: the worker must not survive.
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent(f"""
        import functools, sys, time
        sys.path[:0] = {sys.path!r}
        from support.served import Served
        from grpo_run.core.placement.processes import ProcessWorker
        if __name__ == "__main__":
            w = ProcessWorker("orphan", functools.partial(Served, 0))
            w.start()
            print(w.submit("pid").result(timeout=60), flush=True)
            time.sleep(120)
    """))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        parent.kill()
        parent.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _alive(child):
            time.sleep(0.1)
        assert not _alive(child)
    finally:
        parent.kill()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except FileNotFoundError:
        return False
