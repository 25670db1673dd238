"""The reaper (``core/rollout/env_reaper.py``), driven as the trainer drives it: what it was told
is the environment's dies with a trainer that exits without clean-up; nothing does after its
goodbye, nor what was discarded or never listed. (Through ``grpo-run`` and a SIGKILL:
``test_env_processes.py``.)"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time

import psutil
import pytest

REAPED = """
import os, subprocess, sys, time
import psutil
from grpo_run.core.rollout.env_reaper import Reaper

key = lambda p: (p.pid, psutil.Process(p.pid).create_time())
listed, discarded, unlisted = (subprocess.Popen(["sleep", "60"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(3))
reaper = Reaper()
reaper.add([key(listed), key(discarded)])
reaper.discard([key(discarded)])
print(listed.pid, discarded.pid, unlisted.pid, flush=True)
if sys.argv[1] == "close":
    reaper.close()
os._exit(0)  # no clean-up code runs, as under SIGKILL
"""


@pytest.mark.parametrize("how", ["killed", "close"])
def test_the_reaper_ends_what_is_listed_when_the_trainer_dies_and_nothing_after_a_goodbye(how):
    out = subprocess.run([sys.executable, "-c", REAPED, how], capture_output=True, text=True, check=True).stdout
    listed, discarded, unlisted = (psutil.Process(int(pid)) for pid in out.split())
    try:
        deadline = time.monotonic() + 10
        while how == "killed" and listed.is_running() and listed.status() != psutil.STATUS_ZOMBIE \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        gone = not listed.is_running() or listed.status() == psutil.STATUS_ZOMBIE
        assert gone == (how == "killed")  # after q (close), nothing is ended by the reaper
        assert discarded.is_running() and unlisted.is_running()
    finally:
        for proc in (listed, discarded, unlisted):
            with contextlib.suppress(psutil.Error):
                proc.kill()
