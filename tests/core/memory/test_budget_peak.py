"""The resident peak a run reports is its own, not the peak of the process that started it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from grpo_run.core.memory.budget import resident_peak_bytes


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux carries ru_maxrss over exec")
def test_a_process_started_by_a_large_one_reports_its_own_peak() -> None:
    held = bytearray(600 * 2**20)
    held[:: 4096] = b"\1" * len(held[:: 4096])  # touch every page: 600 MB resident in this process
    probe = "from grpo_run.core.memory.budget import resident_peak_bytes; print(resident_peak_bytes())"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    child_peak = float(done.stdout)
    assert resident_peak_bytes() >= 600 * 2**20
    assert child_peak < 300 * 2**20, child_peak  # ru_maxrss said 600+ MB here: the parent's
    del held
