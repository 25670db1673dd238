"""``grpo-run`` with an installed environment package that returns bad values (issue 33): each
kind fails its episode, counted and named in the log; the run stops on the error-rate rule with
one ``run stopped:`` line and no traceback. Rewards outside ``environment.reward_range``
(``1e308`` on some rows) drop their episodes and never reach the group mean: the run completes
with finite rewards and finite weights."""

from __future__ import annotations

import json
import math
import os
import re
import time

import tomllib

import pytest
import torch
from safetensors.torch import load_file

from grpo_run.cli.main import main
from grpo_run.core.config.toml_writer import dumps_toml
from support.hostile_env import EXPECTED, KINDS, install
from support.processes import run_grpo
from support.runs import merge

pytestmark = pytest.mark.timeout(240)

CONFIG = """
[model]
name_or_path = "tiny-arithmetic"

[task]
name = "arithmetic"
max_operand = 49
num_eval = 4

[data]
max_prompt_token_length = 16

[rollout]
num_unique_prompts_rollout = {prompts}
num_samples_per_prompt_rollout = 2
response_length = 32

[environment]
name = "hostile"
max_turns = 2
kinds = {kinds}
every = {every}

[renderer]
name = "tiny-chat"

[scoring]
row_verifiers = false
error_min_calls = 8
error_window = 8

[verifiers.non_stop_penalty]
all_rows = true

[train]
total_steps = 2
local_eval_every = 0

[logging]
progress = false
"""


def _config(tmp_path, kinds, *, prompts, every=1, **sections):
    """The config above; ``sections`` are merged into its tables (``environment={...}``)."""
    path = tmp_path / "hostile.toml"
    cfg = merge(tomllib.loads(CONFIG.format(prompts=prompts, kinds=json.dumps(kinds), every=every)), sections)
    path.write_text(dumps_toml(cfg), encoding="utf-8")
    return path


def _metrics(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_every_bad_value_of_an_installed_environment_drops_its_episode_and_the_run_stops_in_one_line(
        tmp_path, monkeypatch):
    root = install(tmp_path / "site")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    cfg = _config(tmp_path, KINDS, prompts=32)  # one row per kind in the first batch
    run = tmp_path / "run"
    done = run_grpo([str(cfg), "--output-dir", str(run)])

    assert done.returncode == 1 and "Traceback" not in done.output and done.leftovers == [], done.output
    assert re.fullmatch(r"run stopped: environment 'hostile' failed \d of its last 8 calls \(\d+%, above "
                        r"scoring.max_error_rate = 0.5\); last error \(row '[^']+'\): .+\. Fix the environment, "
                        r"its config or the data, or raise scoring.max_error_rate \(1.0 disables this check\)",
                        done.lines[-1]), done.output
    errors = [e["error"] for e in map(json.loads, (run / "log.jsonl").read_text().splitlines())
              if e.get("event") == "episode_failed"]
    missing = [kind for kind in KINDS if not any(EXPECTED[kind] in error for error in errors)]
    assert missing == [], errors


def test_an_environment_reward_of_1e308_drops_its_episode_and_never_reaches_the_weights(tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(install(tmp_path / "site")))
    cfg = _config(tmp_path, ["reward-1e308"], prompts=4, every=4)  # one row in four
    run = tmp_path / "run"
    assert main([str(cfg), "--output-dir", str(run)]) == 0, capsys.readouterr().err
    metrics = _metrics(run)
    assert sum(m["env/error_rate"] for m in metrics) > 0  # the dropped episodes were counted
    assert all(math.isfinite(m["reward/mean"]) for m in metrics if "reward/mean" in m)
    log = (run / "log.jsonl").read_text()
    assert "step returned reward 1e+308, outside environment.reward_range = [-100, 100]" in log
    weights = load_file(run / "checkpoints" / "step_2" / "model.safetensors")
    assert all(torch.isfinite(t).all() for t in weights.values())


def test_instant_environment_calls_never_time_out_however_long_generation_takes(tmp_path, monkeypatch, capsys):
    """64 prompts x 8 episodes whose every call returns at once, under a 0.5 s episode limit:
    episodes stay open through the batched generation of every round of turns, longer than that,
    which is not the environment's time. (The wall-clock limit failed 377 of 512 episodes at step 1,
    all at step 2.)"""
    from grpo_run.plugins.engines.hf import HFEngine

    generate = HFEngine.generate_sync

    def slow_generate(self, *args, **kwargs):  # each round of turns outlasts the limit, on any machine
        time.sleep(0.6)
        return generate(self, *args, **kwargs)

    monkeypatch.setattr(HFEngine, "generate_sync", slow_generate)
    monkeypatch.syspath_prepend(str(install(tmp_path / "site")))
    cfg = _config(tmp_path, [], prompts=64, rollout={"num_samples_per_prompt_rollout": 8},
                  environment={"episode_timeout_s": 0.5}, scoring={"error_min_calls": 64, "error_window": 64})
    run = tmp_path / "run"
    assert main([str(cfg), "--output-dir", str(run)]) == 0, capsys.readouterr().err

    metrics = _metrics(run)
    assert [m["step"] for m in metrics] == [1, 2]
    assert all(m["env/episodes"] == 512 and m["env/error_rate"] == 0 and m["env/timeout_rate"] == 0 for m in metrics)
    # Each episode waited past the limit for generation; its own time stayed far below it.
    assert all(m["env/generation_s"] / m["env/episodes"] > 0.5 for m in metrics)
    assert all(m["env/env_s"] / m["env/episodes"] < 0.05 for m in metrics)


def test_an_evaluation_whose_every_episode_failed_says_so_instead_of_an_accuracy_of_0(tmp_path, monkeypatch):
    root = install(tmp_path / "site")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    cfg = _config(tmp_path, ["reward-str"], prompts=4, train={"local_eval_every": 1})
    run = tmp_path / "run"
    done = run_grpo([str(cfg), "--output-dir", str(run)])

    assert done.returncode == 1 and "Traceback" not in done.output, done.output
    assert "starting eval/accuracy" not in done.output
    assert ("warning: the evaluation before training: all 4 greedy episodes failed, so there is no eval/accuracy: "
            "environment 'hostile' failed (first failure, row ") in done.output, done.output
    assert "step returned reward '1.0', not a number. Fix the environment or its limits" in done.output
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    assert any(e.get("event") == "evaluation_failed" for e in log)


def test_grpo_run_eval_of_a_checkpoint_whose_every_episode_fails_is_an_error_not_an_accuracy(tmp_path, monkeypatch,
                                                                                            capsys):
    from grpo_run.plugins.models.sources import CHECKPOINTS_DIR

    monkeypatch.syspath_prepend(str(install(tmp_path / "site")))
    cfg = _config(tmp_path, ["reward-str"], prompts=4)
    assert main(["eval", str(cfg), "--checkpoint", str(CHECKPOINTS_DIR / "tiny-arithmetic"), "--json"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    assert err.splitlines()[-1].startswith("run stopped: the evaluation before training: all 4 greedy episodes failed, "
                                           "so there is no eval/accuracy: environment 'hostile' failed"), err


@pytest.fixture
def hostile_path(tmp_path, monkeypatch):
    """``grpo-run-hostile`` installed for the ``grpo-run`` subprocesses."""
    root = install(tmp_path / "site")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))


@pytest.mark.parametrize("kind, call", [("step-os-exit", "step"), ("finish-os-exit", "finish")])
def test_an_environment_that_ends_the_trainer_process_is_named_as_the_run_ends(tmp_path, hostile_path, kind, call):
    """``os._exit(7)`` inside ``step`` (on a thread) or ``async def finish`` (on the event loop):
    the run ended with exit 7 and only the run directory on the console."""
    cfg = _config(tmp_path, [kind], prompts=4, every=4)
    done = run_grpo([str(cfg), "--output-dir", str(tmp_path / "run")])

    assert done.returncode == 7 and "Traceback" not in done.output, done.output
    assert done.lines[-1] == (
        f"run ended: environment 'hostile' {call} called os._exit(7), which ends the trainer process at once: "
        f"nothing since the last checkpoint is saved. Environment code runs in the trainer; with "
        f'environment.isolation = "process" it runs in worker processes, where this fails only its episodes')
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert log[-1]["event"] == "environment_ended_process"


def test_a_crash_inside_an_environment_is_said_in_one_line_naming_the_environment(tmp_path, hostile_path):
    """A segmentation fault in ``step`` (a C extension's bug): no Python code runs after it. It was
    silent (exit -11), then faulthandler's 83 lines of every thread's stack without a word of what
    to do; now one line as for ``os._exit``, the stacks kept in the run directory."""
    cfg = _config(tmp_path, ["step-segfault"], prompts=4, every=4)
    run = tmp_path / "run"
    done = run_grpo([str(cfg), "--output-dir", str(run)])

    assert done.returncode == -11, done.output
    assert "Fatal Python error" not in done.output and done.leftovers == [], done.output
    assert re.fullmatch(r"run ended: environment 'hostile' step crashed the trainer process \(Segmentation fault, in "
                        r"step at grpo_run_hostile\.py:\d+\): nothing since the last checkpoint is saved\. Environment "
                        r"code runs in the trainer; with environment\.isolation = \"process\" it runs in worker "
                        rf"processes, where this fails only its episodes; every thread's stack: {run}/crash\.txt",
                        done.lines[-1]), done.output
    stacks = (run / "crash.txt").read_text()
    assert "Fatal Python error: Segmentation fault" in stacks
    assert re.search(r'File ".*grpo_run_hostile\.py", line \d+ in step', stacks), stacks
    assert json.loads((run / "log.jsonl").read_text().splitlines()[-1])["event"] == "run_crashed"


def test_with_isolation_process_an_environment_that_ends_its_process_fails_only_its_episodes(tmp_path, hostile_path):
    cfg = _config(tmp_path, ["step-os-exit-once"], prompts=4, environment={"isolation": "process", "workers": 2,
                  "once_file": str(tmp_path / "exited")}, scoring={"max_error_rate": 1.0})
    run = tmp_path / "run"
    done = run_grpo([str(cfg), "--output-dir", str(run)])

    assert done.returncode == 0 and "Traceback" not in done.output and done.leftovers == [], done.output
    assert sum(m["env/error_rate"] for m in _metrics(run)) > 0
    assert re.search(r"environment step raised WorkerCallError: the environment worker \(pid \d+\) died "
                     r"\(exit code 7\)", (run / "log.jsonl").read_text())
