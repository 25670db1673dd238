"""The crash watcher's one line, read off a faulthandler report: the environment call or async
verifier that ran on the crashing thread, the user's frame it crashed in, the reason."""

from __future__ import annotations

import os
import subprocess
import re
import sys
import sysconfig
import textwrap
from pathlib import Path

from grpo_run.core import crash_frames
from grpo_run.core.crash_watch import PREFIX, describe

REPORT = """Fatal Python error: Segmentation fault

Thread 0x00007f0000000001 (most recent call first):
  File "{stdlib}/threading.py", line 327 in wait

Current thread 0x00007f0000000002 (most recent call first):
  File "{stdlib}/ctypes/__init__.py", line 519 in string_at
  File "/home/me/my_env.py", line 40 in step
  File "{grpo}/core/rollout/env_calls.py", line 71 in _checked_call
  File "{grpo}/core/crash_frames.py", line 23 in grpo-run: {label}
  File "{stdlib}/threading.py", line 982 in run

Extension modules: numpy.core._multiarray_umath (total: 1)
"""
GRPO = str(Path(crash_frames.__file__).parents[1])
STDLIB = sysconfig.get_paths()["stdlib"]


def test_the_watcher_reads_the_names_the_frames_are_given():
    assert PREFIX == crash_frames.PREFIX


def test_a_crash_in_an_environment_call_names_it_and_the_users_frame():
    line = describe(REPORT.format(grpo=GRPO, stdlib=STDLIB, label="environment 'maze' step"), Path("runs/x/crash.txt"))
    assert line == ("run ended: environment 'maze' step crashed the trainer process (Segmentation fault, in step at "
                    "my_env.py:40): nothing since the last checkpoint is saved. Environment code runs in the trainer; "
                    'with environment.isolation = "process" it runs in worker processes, where this fails only its '
                    "episodes; every thread's stack: runs/x/crash.txt")


def test_a_crash_elsewhere_says_where_without_blaming_an_environment():
    report = REPORT.format(grpo=GRPO, stdlib=STDLIB, label="x").replace("grpo-run: x", "run")
    assert describe(report, Path("crash.txt")) == (
        "run ended: the trainer process crashed (Segmentation fault, in step at my_env.py:40): nothing since the last "
        "checkpoint is saved; every thread's stack: crash.txt")


def test_a_segfault_on_a_named_frame_is_said_in_one_line_by_the_watcher(tmp_path):
    """The watcher process itself, with a child that segfaults inside a named frame."""
    script = textwrap.dedent(f"""
        import ctypes, sys
        sys.path.insert(0, {str(Path(GRPO).parent)!r})
        from pathlib import Path
        from grpo_run.core.crash_watch import start
        from grpo_run.core.crash_frames import named
        start(Path({str(tmp_path / "crash.txt")!r}))
        named("async verifier 'v'")(ctypes.string_at, 0)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": ""})
    assert done.returncode == -11
    assert re.fullmatch(r"run ended: async verifier 'v' crashed the trainer process \(Segmentation fault, in string_at at "
                        r"__init__\.py:\d+\): nothing since the last checkpoint is saved; every thread's stack: "
                        + re.escape(str(tmp_path / "crash.txt")) + "\n", done.stderr), done.stderr
    assert "Fatal Python error: Segmentation fault" in (tmp_path / "crash.txt").read_text()
