"""Joining a Ray cluster that uses token authentication (docs/scale-out.md), for real (``heavy``):
a head node started with ``ray start --head`` and ``RAY_AUTH_MODE=token`` on this machine (its
own home directory, so its own ``~/.ray/auth_token``), and ``grpo-run`` as the driver, with and
without the cluster's token. Ray's own error was ~20 retry warnings and a traceback ending in
``ConnectionError: Failed to connect to Ray cluster``; then the one line came after those warnings."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from support.processes import kill_session, run_grpo
from support.runs import write_run
from support.verifiers import LENGTH_REWARD

pytestmark = [pytest.mark.heavy]
pytest.importorskip("ray")
RAY = str(Path(sys.executable).with_name("ray"))


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    """A one-node cluster with token authentication: (address, its token)."""
    home = tmp_path_factory.mktemp("head-home")
    temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # Ray's socket paths must stay short
    env = {**os.environ, "HOME": str(home), "RAY_AUTH_MODE": "token"}
    env.pop("RAY_ADDRESS", None)
    subprocess.run([RAY, "get-auth-token", "--generate"], env=env, check=True, capture_output=True, timeout=60)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = home / "head.log"
    with log.open("w") as out:
        proc = subprocess.Popen([RAY, "start", "--head", f"--port={port}", "--num-cpus=2", "--include-dashboard=false",
                                 f"--temp-dir={temp_dir}", "--block"], env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while "Ray runtime started" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)
        yield f"127.0.0.1:{port}", (home / ".ray" / "auth_token").read_text().strip()
    finally:
        proc.terminate()  # --block: ends the node's processes with it
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            pass
        kill_session(proc.pid)
        proc.wait()
        shutil.rmtree(temp_dir, ignore_errors=True)


def _config(tmp_path: Path, tiny_model_dir: Path) -> Path:
    return write_run(tmp_path, verifier=LENGTH_REWARD, model={"name_or_path": str(tiny_model_dir)},
                     rollout={"num_samples_per_prompt_rollout": 2, "response_length": 4}, train={"total_steps": 1},
                     distributed={"backend": "ray"})


def test_a_driver_without_the_clusters_token_is_told_so_in_one_line(head, tmp_path, tiny_model_dir, monkeypatch):
    address, _ = head
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("RAY_ADDRESS", address)
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    done = run_grpo([str(_config(tmp_path, tiny_model_dir)), "--output-dir", str(tmp_path / "run")], limit_s=180)

    assert done.returncode == 2 and "Traceback" not in done.output, done.output
    assert len(done.lines) == 2, done.output  # the run directory, then one line: Ray's ~20 retry lines are in the log
    assert re.fullmatch(
        rf"error: cannot join the Ray cluster at RAY_ADDRESS={address}: it uses Ray's token-based authentication and "
        rf"refused this process \(RAY_AUTH_MODE is not set here; there is no file {re.escape(str(home))}/.ray/auth_token\)"
        r"\. Export RAY_AUTH_MODE=token and give this process the cluster's token, which `ray get-auth-token` prints "
        r"on the head node: .* \(docs/scale-out.md\)", done.lines[-1]), done.lines[-1]


def test_a_driver_with_the_clusters_token_joins_and_trains(head, tmp_path, tiny_model_dir, monkeypatch):
    address, token = head
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("RAY_ADDRESS", address)
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    monkeypatch.setenv("RAY_AUTH_TOKEN", token)
    run = tmp_path / "run"
    done = run_grpo([str(_config(tmp_path, tiny_model_dir)), "--output-dir", str(run)], limit_s=300)

    assert done.returncode == 0, done.output
    assert (run / "checkpoints" / "step_1" / "model.safetensors").exists()
