"""Episode runs beyond one process (heavy: DeepSpeed and Ray are extras). Two steps of the
calculator-tool example, every episode nudged to two turns (``support.nudging_env``):

* with ``learner.num_learners = 2`` (DDP over gloo, or DeepSpeed ZeRO-2 over gloo) the first
  step trains on the same episodes as one process and gets the same loss and gradient norm: the
  per-token masks of episodes survive the split over ranks (the one-process run is shared);
* on a local Ray instance, with two learner actors, the run completes.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_run.cli.main import main
from support.paths import EXAMPLES, TESTS

pytestmark = pytest.mark.heavy

EPISODES = ["environment.name=support.nudging_env:NudgingTools", "environment.max_turns=2",
            "rollout.num_unique_prompts_rollout=2", "rollout.num_samples_per_prompt_rollout=4",
            "train.total_steps=2", "train.local_eval_every=0", "optim.warmup_steps=1",
            "algorithm.filter_zero_std_samples=false", "logging.progress=false"]
SAME_EPISODES = ("reward/mean", "reward/std", "env/turns_mean", "env/episodes", "env/env_token_share")


def _argv(out: Path, *extra: str) -> list[str]:
    argv = [str(EXAMPLES / "calculator-tool.toml"), "--output-dir", str(out)]
    for override in [*EPISODES, *extra]:
        argv += ["--set", override]
    return argv


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def _ranks(out: Path) -> int:
    started = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines() if '"learners_started"' in line]
    return len(started[0]["ranks"])


@pytest.fixture(scope="module")
def one_process(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("episodes") / "one"
    assert main(_argv(out)) == 0
    return _rows(out)


@pytest.mark.parametrize("strategy", [
    pytest.param(["learner.num_learners=2"], id="ddp"),
    # ZeRO-2 shards gradients and optimizer state; its own clipping and loss scaling must give the
    # same numbers (fp32, no loss scaler): a mismatch in masks or the normaliser would show here.
    pytest.param(["learner.num_learners=2", "learner.strategy=deepspeed", "learner.zero_stage=2"], id="deepspeed"),
])
def test_episodes_with_two_learners_train_as_one_process(tmp_path, one_process, strategy):
    if "learner.strategy=deepspeed" in strategy:
        pytest.importorskip("deepspeed")
    assert main(_argv(tmp_path / "two", *strategy)) == 0
    assert _ranks(tmp_path / "two") == 2
    one, two = one_process, _rows(tmp_path / "two")
    assert [r["step"] for r in two] == [1, 2] and all(r["env/error_rate"] == 0 for r in two)
    assert all(r["env/turns_mean"] == 2 for r in two)
    assert {k: one[0][k] for k in SAME_EPISODES} == {k: two[0][k] for k in SAME_EPISODES}
    assert one[0]["optim/grad_norm"] > 0  # the step had something to learn
    for key in ("loss/policy", "optim/grad_norm"):
        assert two[0][key] == pytest.approx(one[0][key], rel=1e-4, abs=1e-7), key


def test_episodes_on_ray_with_two_learners(tmp_path):
    pytest.importorskip("ray")
    out = tmp_path / "run"
    env = {**os.environ, "HF_HUB_DISABLE_PROGRESS_BARS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))}
    env.pop("RAY_ADDRESS", None)  # a local instance of its own
    argv = _argv(out, "distributed.backend=ray", "learner.num_learners=2")
    proc = subprocess.run([sys.executable, "-m", "grpo_run.cli.main", *argv], env=env, text=True,
                          capture_output=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _ranks(out) == 2
    rows = _rows(out)
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["env/error_rate"] == 0 and r["env/turns_mean"] == 2 for r in rows)
    assert all(math.isfinite(r["loss/policy"]) and math.isfinite(r["optim/grad_norm"]) for r in rows)
