"""Placement on a Ray cluster of two nodes, for real (``heavy``): a head and a second node started
with ``ray start`` on this machine, each with one ``learner_slot`` custom resource (the recipe of
docs/scale-out.md for one learner per node).

* Two learners that each ask for a ``learner_slot`` land on different nodes, and the log names
  the node of every actor.
* A placement that can never fit fails at once, saying what it needs, not after
  ``distributed.startup_timeout_s``: three learners for two slots, ``STRICT_SPREAD`` over more
  actors than nodes.
"""

from __future__ import annotations

import json
import os
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
SLOTS = '{"learner_slot": 1}'


def _start(args: list[str], env: dict[str, str], log: Path, ready: str) -> subprocess.Popen:
    with log.open("w") as out:
        proc = subprocess.Popen([RAY, "start", *args, "--block"], env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    deadline = time.monotonic() + 240
    while ready not in log.read_text():
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.5)
    return proc


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Two nodes of two CPUs and one learner_slot each, no token authentication: the address."""
    home = tmp_path_factory.mktemp("cluster-home")  # no ~/.ray/auth_token there: no authentication
    temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # Ray's socket paths must stay short
    env = {**os.environ, "HOME": str(home)}
    for name in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        env.pop(name, None)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    nodes = []
    try:
        nodes.append(_start(["--head", f"--port={port}", "--num-cpus=2", f"--resources={SLOTS}",
                             "--include-dashboard=false", f"--temp-dir={temp_dir}"], env, home / "head.log",
                            "Ray runtime started"))
        nodes.append(_start([f"--address=127.0.0.1:{port}", "--num-cpus=2", f"--resources={SLOTS}"], env,
                            home / "node.log", "Ray runtime started"))
        yield f"127.0.0.1:{port}", home
    finally:
        for proc in reversed(nodes):
            proc.terminate()  # --block: ends the node's processes with it
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
            kill_session(proc.pid)
            proc.wait()
        shutil.rmtree(temp_dir, ignore_errors=True)


def _config(tmp_path: Path, tiny_model_dir: Path, learners: int, **distributed) -> Path:
    return write_run(tmp_path, verifier=LENGTH_REWARD, model={"name_or_path": str(tiny_model_dir)},
                     rollout={"num_samples_per_prompt_rollout": 2, "response_length": 4}, train={"total_steps": 1},
                     learner={"num_learners": learners},
                     distributed={"backend": "ray", "startup_timeout_s": 600.0,
                                  "learner_resources": {"num_cpus": 1, "resources": {"learner_slot": 1}},
                                  "engine_resources": {"num_cpus": 1}, **distributed})


@pytest.fixture
def joined(cluster, monkeypatch):
    address, home = cluster
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("RAY_ADDRESS", address)
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    return address


def _events(run: Path, name: str) -> list[dict]:
    return [r for r in map(json.loads, (run / "log.jsonl").read_text().splitlines()) if r.get("event") == name]


def test_one_learner_per_node_by_a_custom_resource_and_every_actors_node_in_the_log(joined, tmp_path, tiny_model_dir):
    run = tmp_path / "run"
    done = run_grpo([str(_config(tmp_path, tiny_model_dir, 2)), "--output-dir", str(run)], limit_s=420)
    assert done.returncode == 0, done.output
    ranks = _events(run, "learners_placed")[0]["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert len({r["node_id"] for r in ranks}) == 2  # a learner_slot each: one learner per node
    assert all(r["node_ip"] and r["hostname"] and r["pid"] for r in ranks)
    engines = _events(run, "engines_started")[0]["engines"]
    assert engines[0]["node_id"] in {r["node_id"] for r in ranks}


@pytest.mark.parametrize(("learners", "strategy", "message"), [
    (3, None, "the 4 actors (3 learners, 1 engine) need {'CPU': 4.0, 'learner_slot': 3.0} together and the whole "
              "cluster has {'learner_slot': 2.0} of learner_slot (2 nodes: "),
    (2, "STRICT_SPREAD", 'placement_strategy = "STRICT_SPREAD" needs 3 nodes, one per actor (2 learners, 1 engine), '
                         "and at most 2 can each hold one (2 nodes: "),
], ids=["more-learners-than-slots", "strict-spread"])
def test_a_placement_that_cannot_fit_fails_at_once_saying_what_it_needs(joined, tmp_path, tiny_model_dir,
                                                                          learners, strategy, message):
    extra = {"placement_strategy": strategy} if strategy else {}
    started = time.monotonic()
    done = run_grpo([str(_config(tmp_path, tiny_model_dir, learners, **extra)), "--output-dir", str(tmp_path / "r")],
                    limit_s=420)
    took = time.monotonic() - started
    assert done.returncode == 1 and "Traceback" not in done.output, done.output
    assert done.lines[-1].startswith("run stopped: " + message), done.lines[-1]
    assert took < 300, took  # not startup_timeout_s (600 s): joining and loading take the rest
