"""Running ``grpo-run`` as a user does, in a subprocess of its own session, for signal and
console tests: wait for something to happen, send it signals, collect what it printed, and find
processes it left behind. Signals only ever go to processes these helpers started."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import attrs
import psutil

from support.paths import TESTS

GRPO_RUN = [sys.executable, "-m", "grpo_run.cli.main"]


def subprocess_env() -> dict[str, str]:
    """This environment, with ``tests/`` importable (for ``support.*`` verifiers) and a wide console."""
    path = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "COLUMNS": "400"}


@attrs.define
class Finished:
    returncode: int
    output: str
    """stdout and stderr together, as a terminal shows them."""
    seconds_after_signal: float | None
    leftovers: list[str]
    """Processes of its session still alive (not zombies) a few seconds after it exited."""

    @property
    def lines(self) -> list[str]:
        return [line for line in self.output.splitlines() if line.strip()]


def metrics_steps(run_dir: Path) -> list[int]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["step"] for line in path.read_text().splitlines() if line.strip().endswith("}")]


def run_grpo(
    args: Sequence[str],
    *,
    when: Callable[[str], bool] = lambda output: False,
    signals: Sequence[tuple[int, float]] = (),
    limit_s: float = 240.0,
    settle_s: float = 5.0,
    open_files: int | None = None,
) -> Finished:
    """Run ``grpo-run ARGS``; once ``when(output so far)`` holds, send each ``(signal, delay_s)``
    (delays from that moment). Kills the session and fails if it runs past ``limit_s``; processes
    of its session still there ``settle_s`` after it ended are its leftovers. ``open_files``: its
    open-file limit, soft and hard (``ulimit -n``)."""
    env = subprocess_env()

    def limit() -> None:
        if open_files is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))

    proc = subprocess.Popen([*GRPO_RUN, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=env, start_new_session=True, preexec_fn=limit if open_files is not None else None)
    os.set_blocking(proc.stdout.fileno(), False)
    output, start, triggered, first_signal = b"", time.monotonic(), None, None
    pending = list(signals)
    try:
        while proc.poll() is None:
            now = time.monotonic()
            if now - start > limit_s:
                raise AssertionError(f"grpo-run still running after {limit_s} s; output:\n{output.decode()}")
            output += proc.stdout.read() or b""
            if triggered is None and when(output.decode(errors="replace")):
                triggered = now
            while triggered is not None and pending and now - triggered >= pending[0][1]:
                proc.send_signal(pending.pop(0)[0])
                first_signal = first_signal or now
            time.sleep(0.02)
        ended = time.monotonic()
        while time.monotonic() < ended + settle_s:  # what its children still write (a crash watcher's line)
            more = proc.stdout.read()
            if more == b"":
                break  # every writer is gone
            output += more or b""
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            kill_session(proc.pid)
            proc.wait()
    leftovers = _wait_for_empty_session(proc.pid, settle_s)
    kill_session(proc.pid)
    return Finished(proc.returncode, output.decode(errors="replace"),
                    ended - first_signal if first_signal else None, leftovers)


def _session(sid: int) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getsid(proc.pid) == sid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (OSError, psutil.Error):
            continue
    return found


def _wait_for_empty_session(sid: int, seconds: float) -> list[str]:
    deadline = time.monotonic() + seconds
    while (alive := _session(sid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    described = []
    for proc in alive:
        try:
            described.append(f"{proc.pid} {' '.join(proc.cmdline())[:120]}")
        except psutil.Error:
            continue
    return described


def kill_session(sid: int) -> None:
    """SIGKILL every process of the session ``sid`` (one these helpers started)."""
    for proc in _session(sid):
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.Error:
            continue


@contextlib.contextmanager
def cpu_load(processes: int) -> Iterator[None]:
    """A loaded machine for the block: ``processes`` processes that spin on a CPU each."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]
    try:
        yield
    finally:
        for proc in spinners:
            proc.kill()
            proc.wait()
