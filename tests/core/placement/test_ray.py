"""The embedded task on a local Ray instance (``heavy``: Ray and DeepSpeed are extras).

* ``grpo-run examples/arithmetic.toml --set distributed.backend=ray --set learner.num_learners=2``
  reaches eval accuracy >= 0.9; so does DeepSpeed ZeRO-2 with two engine actors and the scoring
  workers in a scoring actor.
* Killing a learner or engine actor mid-run ends the run within a bounded time with an error
  naming the actor and the step; the checkpoint written before stays intact and resumable.
"""

from __future__ import annotations

import json
import re
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.paths import REPO

from grpo_run.core.loop.checkpoint import find_checkpoint, load_trainer_state

pytestmark = [pytest.mark.heavy, pytest.mark.slow]
pytest.importorskip("ray")


def grpo_run(*args: str, **popen) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    env.pop("RAY_ADDRESS", None)  # a local instance of its own
    return subprocess.Popen([sys.executable, "-m", "grpo_run.cli.main", "examples/arithmetic.toml", *args],
                            cwd=REPO, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)


def best_eval_accuracy(run: Path) -> float:
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return max(line.get("eval/accuracy", 0.0) for line in lines)


@pytest.mark.parametrize(
    "extra",
    [[], ["--set", "learner.strategy=deepspeed", "--set", "engine.num_engines=2", "--set", "distributed.scoring_actors=1"]],
    ids=["ddp", "deepspeed-2-engines-scoring-actor"],
)
def test_arithmetic_learns_on_ray(tmp_path, extra) -> None:
    if "learner.strategy=deepspeed" in extra:
        pytest.importorskip("deepspeed")
    run = tmp_path / "run"
    proc = grpo_run("--set", "distributed.backend=ray", "--set", "learner.num_learners=2", *extra,
                    "--output-dir", str(run))
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]
    assert best_eval_accuracy(run) >= 0.9, out
    started = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()
               if '"learners_started"' in line]
    assert len(started[0]["ranks"]) == 2
    if "distributed.scoring_actors=1" in extra:
        assert '"scoring_actors_started"' in (run / "log.jsonl").read_text()


def started_pids(run: Path, event: str, key: str) -> list[int]:
    log = run / "log.jsonl"
    if not log.exists():
        return []
    for line in log.read_text().splitlines():
        record = json.loads(line)
        if record.get("event") == event:
            return [entry["pid"] for entry in record[key]]
    return []


@pytest.mark.parametrize(("event", "key", "victim", "message"), [
    ("learners_started", "ranks", 1,
     r"learner rank 1 \(Ray actor \w+, pid {pid} on \S+\) died during \w+ \((checkpoint of )?step \d+\)"),
    ("engines_started", "engines", 0, r"engine 0 \(Ray actor \w+, pid {pid} on \S+\) died during \w+"),
], ids=["learner", "engine"])
def test_a_killed_actor_ends_the_run_naming_it_and_keeps_the_checkpoint(tmp_path, event, key, victim, message) -> None:
    run = tmp_path / "run"
    proc = grpo_run("--set", "distributed.backend=ray", "--set", "learner.num_learners=2",
                    "--set", "checkpoint.save_freq=1", "--set", "train.local_eval_every=0",
                    "--set", "train.stop_at_eval_accuracy=0", "--output-dir", str(run))
    try:
        deadline = time.monotonic() + 600
        while not (run / "checkpoints" / "step_2" / "trainer_state.pt").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()[-3000:]
            time.sleep(0.2)
        pid = started_pids(run, event, key)[victim]
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        _, err = proc.communicate(timeout=120)
        assert time.monotonic() - killed < 60
    finally:
        proc.kill()
    assert proc.returncode == 1, err[-3000:]
    assert any(re.search(message.format(pid=pid), line) for line in err.splitlines()), err[-3000:]
    assert "Traceback" not in err.split("error:")[-1]
    assert "Task exception was never retrieved" not in err and "Traceback" not in err, err[-3000:]
    # Every checkpoint on disk is complete and resumable (written atomically before the kill).
    newest = find_checkpoint(run)
    assert int(load_trainer_state(newest)["step"]) >= 2 and (newest / "model.safetensors").is_file()
