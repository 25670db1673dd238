"""``python -m grpo_run``, ``--version`` and shell completion."""

from __future__ import annotations

import os
import subprocess
import sys

import grpo_run


def test_python_dash_m_grpo_run_version():
    proc = subprocess.run([sys.executable, "-m", "grpo_run", "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert proc.stdout == f"grpo-run {grpo_run.__version__}\n"
    assert grpo_run.__version__ != "0+unknown"


def test_python_dash_m_grpo_run_runs_the_command(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "grpo_run", "check", str(tmp_path / "none.toml")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr == f"error: {tmp_path / 'none.toml'}: no such file\n"


def test_completion_offers_the_subcommands(tmp_path):
    out = tmp_path / "completions"
    env = {**os.environ, "_ARGCOMPLETE": "1", "COMP_LINE": "grpo-run ch", "COMP_POINT": "11",
           "_ARGCOMPLETE_STDOUT_FILENAME": str(out), "_ARGCOMPLETE_IFS": "\n"}
    proc = subprocess.run([sys.executable, "-m", "grpo_run"], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert out.read_text().split() == ["check"]
    env.update(COMP_LINE="grpo-run check --s", COMP_POINT="18")
    subprocess.run([sys.executable, "-m", "grpo_run"], env=env, capture_output=True, text=True, timeout=60)
    assert out.read_text().split() == ["--set"]
