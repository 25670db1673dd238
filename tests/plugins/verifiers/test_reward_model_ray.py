"""``distributed.backend = "ray"``: the reward model scores in a Ray actor of its own (``heavy``:
Ray is an extra), listed in the run's ``pipeline.json`` with the resources it asked for."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support.paths import REPO
from support.reward_models import random_reward_model, tiny_arithmetic_dir

pytestmark = [pytest.mark.heavy, pytest.mark.slow]
pytest.importorskip("ray")


def test_the_reward_model_scores_in_an_actor_of_its_own(tmp_path) -> None:
    model = random_reward_model(tmp_path / "rm", tiny_arithmetic_dir())
    run = tmp_path / "run"
    sets = ["distributed.backend=ray", "train.total_steps=2", "train.local_eval_every=0", "logging.progress=false",
            f"verifiers.reward_model.model={model}", "verifiers.reward_model.transform=sigmoid",
            "verifiers.reward_model.num_cpus=1"]
    env = {**os.environ, "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    env.pop("RAY_ADDRESS", None)  # a local instance of its own
    proc = subprocess.Popen([sys.executable, "-m", "grpo_run.cli.main", "examples/arithmetic.toml", "--output-dir",
                             str(run), *[arg for s in sets for arg in ("--set", s)]],
                            cwd=REPO, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]
    scoring = json.loads((run / "pipeline.json").read_text())["scoring"]
    own = [entry for entry in scoring if entry["verifiers"] == ["reward_model"]]
    assert len(own) == 1 and own[0]["where"] == "ray actors of its own"
    assert own[0]["resources"] == {"num_cpus": 1.0, "num_gpus": 0.0}
    (actor,) = own[0]["actors"]
    assert actor["pid"] != proc.pid and len(actor["worker_pids"]) == 1  # one worker process inside the actor
    assert [entry["verifiers"] for entry in scoring if entry is not own[0]] == [["math"]]  # the driver's workers
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in metrics if m["step"] >= 1]
    assert [m["verifier/reward_model/calls"] for m in steps] == [128.0, 128.0]
    assert all(m["verifier/reward_model/errors"] == 0 and 0 < m["verifier/reward_model/mean_score"] < 1 for m in steps)
