"""An environment that fails makes a run fail, naming it: a step whose every episode failed
(below ``scoring.error_min_calls``, so the error-rate rule has not spoken yet) stops the run with
``run stopped:``, the environment and its first failure, exit 1 -- not a completed run whose
warning blames the reward, the temperature and the group size. Episodes that fail often enough
to drop every group, but not all of them, get a no-signal warning that names the environment."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from grpo_run.cli.main import main
from grpo_run.core.loop.progress import SignalWatch

ENVIRONMENT = '''
"""A plugin author's environment whose step is broken."""
import attrs
import grpo_run


@attrs.frozen
class BrokenStepConfig:
    every: int = 1
    """Raise in the step of every ``every``-th episode of a row (1: all of them)."""


class BrokenStep:
    name = "broken-step"
    Config = BrokenStepConfig

    def __init__(self, config, tools):
        self.config = config
        self.episodes = {}  # row id -> episodes started: a group's 8 episodes are 8 in a row

    def reset(self, row, seed):
        count = self.episodes[row["id"]] = self.episodes.get(row["id"], 0) + 1
        return grpo_run.EnvReset([dict(m) for m in row["messages"]], [], count)

    def step(self, state, action):
        if state % self.config.every == 0:
            raise KeyError("score_table")
        return grpo_run.EnvStep(done=True, reward=0.5)
'''

CONFIG = """
[model]
name_or_path = "tiny-arithmetic"

[task]
name = "arithmetic"
max_operand = 49
num_eval = 8

[data]
max_prompt_token_length = 16

[rollout]
num_unique_prompts_rollout = 6
num_samples_per_prompt_rollout = 8
response_length = 16

[environment]
name = "broken_env:BrokenStep"
every = {every}
max_turns = 1

[renderer]
name = "tiny-chat"

[train]
total_steps = {steps}
local_eval_every = 0

[checkpoint]
save_freq = 1

[verifiers.math]

[logging]
progress = false
"""


def _run(tmp_path: Path, monkeypatch, every: int, steps: int) -> tuple[int, str, Path]:
    package = tmp_path / "site"
    package.mkdir()
    (package / "broken_env.py").write_text(textwrap.dedent(ENVIRONMENT))
    monkeypatch.syspath_prepend(str(package))  # as an installed package is importable
    config = tmp_path / "run.toml"
    config.write_text(CONFIG.format(every=every, steps=steps))
    out = tmp_path / "out"
    return main([str(config), "--output-dir", str(out)]), out


def test_a_step_whose_every_episode_failed_stops_the_run(tmp_path, monkeypatch, capsys) -> None:
    # One step: 48 episodes, below scoring.error_min_calls = 50 (today: rc 0, and a warning that
    # blames the reward, rollout.temperature and the group size).
    rc, out = _run(tmp_path, monkeypatch, every=1, steps=1)
    err = capsys.readouterr().err
    assert rc == 1, err
    assert ("run stopped: step 1: all 48 episodes failed, so there is nothing to train on: environment "
            "'broken_env:BrokenStep' failed (first failure, row ") in err
    assert "environment step raised KeyError: 'score_table'" in err
    assert "Traceback" not in err and "temperature" not in err  # the reward is not blamed
    assert not (out / "checkpoints" / "step_1").exists()  # nothing was trained


def test_failures_that_drop_every_group_are_blamed_on_the_environment(tmp_path, monkeypatch, capsys) -> None:
    # Every 4th episode of a row fails: each group of 8 loses two, so every group is dropped (48
    # episodes, 12 failed) -- yet each step had finished episodes, so the run goes on.
    rc, out = _run(tmp_path, monkeypatch, every=4, steps=2)
    err = capsys.readouterr().err
    assert rc == 0, err
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["rollout/sequences_trained"] for m in metrics] == [0.0, 0.0]
    assert [m["env/error_rate"] for m in metrics] == [0.25, 0.25]
    assert ("warning: 2 of the last 2 steps (1-2) were skipped: environment 'broken_env:BrokenStep' failed "
            "(first failure, row ") in err
    assert "24 of the 96 episodes of those steps failed, and a group with a failed episode is dropped" in err
    assert "temperature" not in err


def test_the_no_signal_warning_still_blames_the_reward_without_failures() -> None:
    watch = SignalWatch(total_steps=2, temperature=0.5, group_size=4)
    assert watch.add(1, {"rollout/sequences_trained": 0.0, "reward/mean": 0.0, "env/error_rate": 0.0}) is None
    text = watch.add(2, {"rollout/sequences_trained": 0.0, "reward/mean": 0.0}, None)
    assert text is not None and "the reward is always 0" in text and "rollout.temperature = 0.5" in text
