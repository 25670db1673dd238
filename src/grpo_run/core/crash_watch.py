"""Says in one line why the trainer process died when a fatal signal ended it, and whose code ran.

A segmentation fault in an extension module that environment code calls (or ``abort()``) ends
the trainer at once: no Python code runs after it. :mod:`faulthandler` still writes every
thread's stack (80-odd lines on the console, the run's own threads among them, no word of what
to do). The ``grpo-run`` command therefore starts this watcher (:func:`start`): faulthandler
writes its report into a pipe whose other end is the watcher's stdin. When the pipe closes (the
trainer is gone, however it ended), a report in it means the trainer crashed: the watcher keeps
the report in ``<run dir>/crash.txt``, appends a ``run_crashed`` record to the run's log, and
writes one line to the console, naming the environment call (or async verifier) that was
running on the crashing thread -- read off a frame named after it
(:mod:`grpo_run.core.crash_frames`) -- as the line for ``os._exit`` does (:mod:`.rollout.env_exit`).

Run as ``python -I .../crash_watch.py CRASH_FILE`` (by path: it imports only the standard library).
"""

from __future__ import annotations

import faulthandler
import json
import os
import re
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

PREFIX = "grpo-run: "
"""The start of a frame's name that says what runs in it (``crash_frames.PREFIX``)."""
_FRAME = re.compile(r'\s*File "(?P<file>.*)", line (?P<line>\d+) in (?P<name>.*)')


def start(crash_file: Path) -> subprocess.Popen[bytes] | None:
    """Start the watcher and point :mod:`faulthandler` at it (None: it could not start; the
    caller falls back to faulthandler on stderr)."""
    read_end, write_end = os.pipe()  # neither is inherited by other child processes
    try:
        proc = subprocess.Popen([sys.executable, "-I", os.path.abspath(__file__), str(crash_file)], stdin=read_end,
                                stdout=subprocess.DEVNULL, close_fds=True)
    except OSError:
        os.close(read_end)
        os.close(write_end)
        return None
    os.close(read_end)
    faulthandler.enable(file=write_end, all_threads=True)  # the descriptor stays open for the process's life
    return proc


def describe(report: str, crash_file: Path) -> str:
    """The one line for a faulthandler ``report``."""
    first = report.strip().splitlines()[0] if report.strip() else ""
    reason = first.removeprefix("Fatal Python error: ").strip() or "a fatal error"
    frames = _current_thread_frames(report)
    label_at = next((i for i, f in enumerate(frames) if f["name"].startswith(PREFIX)), None)
    inside = frames[:label_at] if label_at is not None else frames
    inner = next((f for f in inside if _own_code(f["file"])), inside[0] if inside else None)
    where = f", in {inner['name']} at {Path(inner['file']).name}:{inner['line']}" if inner is not None else ""
    stacks = f"every thread's stack: {crash_file}"
    if label_at is None:
        return f"run ended: the trainer process crashed ({reason}{where}): nothing since the last checkpoint is saved; {stacks}"
    label = frames[label_at]["name"].removeprefix(PREFIX)
    text = f"run ended: {label} crashed the trainer process ({reason}{where}): nothing since the last checkpoint is saved"
    if label.startswith("environment"):
        text += ('. Environment code runs in the trainer; with environment.isolation = "process" it runs in worker '
                 'processes, where this fails only its episodes')
    return f"{text}; {stacks}"


def _own_code(file: str) -> bool:
    """Whether ``file`` is the user's code: not grpo-run's, the standard library's nor an installed package's."""
    path = os.path.abspath(file)
    theirs = [os.path.dirname(os.path.dirname(os.path.abspath(__file__))), sysconfig.get_paths()["stdlib"],
              sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    return not any(path.startswith(root + os.sep) for root in theirs) and "site-packages" not in path


def _current_thread_frames(report: str) -> list[dict[str, str]]:
    """The crashing thread's frames, innermost first."""
    frames, inside = [], False
    for line in report.splitlines():
        if line.startswith("Current thread "):
            inside = True
        elif inside:
            match = _FRAME.match(line)
            if match is None:
                break
            frames.append(match.groupdict())
    return frames


def _watch(crash_file: Path) -> None:
    report = sys.stdin.buffer.read().decode("utf-8", "replace")  # until the trainer is gone
    if "Fatal Python error" not in report:
        return
    line = describe(report, crash_file)
    try:
        crash_file.parent.mkdir(parents=True, exist_ok=True)
        crash_file.write_text(report, encoding="utf-8")
        log = crash_file.parent / "log.jsonl"
        if log.exists():
            with log.open("rb") as seen:
                seen.seek(max(0, log.stat().st_size - 1))
                complete = seen.read(1) in (b"", b"\n")  # a record cut short by the crash gets a line of its own
            with log.open("a", encoding="utf-8") as out:
                out.write(("" if complete else "\n") + json.dumps({
                    "event": "run_crashed", "level": "error", "message": line,
                    "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}) + "\n")
    except OSError:
        line = line.replace(f"every thread's stack: {crash_file}", "every thread's stack could not be saved")
        sys.stderr.write(report)
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the trainer's to handle
    _watch(Path(sys.argv[1]))
