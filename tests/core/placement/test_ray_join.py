"""``RAY_ADDRESS`` naming a cluster that cannot be joined, through ``grpo-run`` with a local Ray
install (``heavy``): one line within ``distributed.join_timeout_s`` (30 s), Ray's retry messages
in the run's log, and a first Ctrl-C ends the run at once. Ray itself retried for 3+ minutes,
~3 lines of ``Failed to connect to GCS`` every 40 s on the console, and a first Ctrl-C printed
"stopping safely" while the process went on for 30 s."""

from __future__ import annotations

import json
import re
import signal
import socket
import time

import pytest

from support.processes import run_grpo
from support.runs import write_run
from support.verifiers import LENGTH_REWARD

pytestmark = [pytest.mark.heavy]
pytest.importorskip("ray")


@pytest.fixture
def nothing_there(monkeypatch) -> str:
    """``RAY_ADDRESS`` naming a loopback port where nothing listens."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"
    monkeypatch.setenv("RAY_ADDRESS", address)
    return address


def _config(tmp_path, tiny_model_dir):
    return write_run(tmp_path, verifier=LENGTH_REWARD, model={"name_or_path": str(tiny_model_dir)},
                     rollout={"num_samples_per_prompt_rollout": 2, "response_length": 4}, train={"total_steps": 1},
                     distributed={"backend": "ray"})


def test_an_address_where_no_cluster_answers_fails_in_one_line_within_the_join_timeout(
        nothing_there, tmp_path, tiny_model_dir):
    run = tmp_path / "run"
    started = time.monotonic()
    done = run_grpo([str(_config(tmp_path, tiny_model_dir)), "--output-dir", str(run)], limit_s=150)
    took = time.monotonic() - started

    assert done.returncode == 1 and "Traceback" not in done.output, done.output
    assert done.lines == [
        f"grpo-run: run directory {run}",
        f"run stopped: cannot join the Ray cluster at RAY_ADDRESS={nothing_there}: no answer within "
        f"distributed.join_timeout_s = 30 s (is its head node running, and is this address its GCS address, as "
        f"`ray start --head` printed it? Ray's own messages are in the run's log)",
    ], done.output
    assert took < 90  # 30 s, and the process's start
    said = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    assert any(e["event"] == "ray_output" and "Failed to connect to GCS" in e["line"] for e in said)


def test_a_first_ctrl_c_while_joining_ends_the_run_at_once(nothing_there, tmp_path, tiny_model_dir):
    cfg, run = _config(tmp_path, tiny_model_dir), tmp_path / "run"
    done = run_grpo([str(cfg), "--output-dir", str(run)], when=lambda out: "run directory" in out,
                    signals=[(signal.SIGINT, 5.0)], limit_s=120)

    assert done.returncode == 130 and "Traceback" not in done.output and done.leftovers == [], done.output
    assert done.seconds_after_signal < 10
    assert done.lines[-2:] == [
        "interrupted by SIGINT before the first step finished: nothing to save",
        f"start again with: grpo-run train {cfg} --output-dir {run} --overwrite",
    ]
    assert not any(re.search(r"rpc_client|gcs_client|Failed to connect", line) for line in done.lines), done.output
