"""SIGTERM during a run of multi-turn episodes (the calculator-tool example, every episode
nudged to two turns): the checkpoint it saves resumes, at ``rollout.async_steps = 1``, to exactly
the run that was never interrupted -- the same weights and the same per-step rewards, turns and
tool counts (the episode producer saves its ``groups_drawn``; turn seeds come from the group
seed, the sample and the turn)."""

from __future__ import annotations

import json
import re
import signal
import tomllib
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from grpo_run.cli.main import main
from support.paths import EXAMPLES
from support.processes import metrics_steps, run_grpo
from grpo_run.core.config.toml_writer import dumps_toml

pytestmark = pytest.mark.timeout(300)
TOTAL = 4
# What must match step for step (timings do not).
COMPARED = ("reward/mean", "reward/std", "env/turns_mean", "env/tool_calls_mean", "env/episodes",
            "env/env_token_share", "rollout/response_length_mean", "loss/policy", "optim/grad_norm")


def _config(tmp_path: Path) -> Path:
    cfg = tomllib.loads((EXAMPLES / "calculator-tool.toml").read_text())
    cfg["environment"]["name"] = "support.nudging_env:SlowNudgingTools"
    cfg["rollout"].update(num_unique_prompts_rollout=2, num_samples_per_prompt_rollout=4, async_steps=1)
    cfg["train"].update(total_steps=TOTAL, local_eval_every=0)
    cfg["train"].pop("stop_at_eval_accuracy")
    cfg["optim"]["warmup_steps"] = 1
    cfg["logging"] = {"progress": False}
    path = tmp_path / "episodes.toml"
    path.write_text(dumps_toml(cfg), encoding="utf-8")
    return path


def _metrics(run: Path) -> dict[int, dict[str, float]]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: {k: r.get(k) for k in COMPARED} for r in rows}  # a skipped step has no loss


def test_sigterm_in_an_episode_run_resumes_to_the_uninterrupted_run(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1]))  # support.* for the in-process runs
    cfg = _config(tmp_path)
    run = tmp_path / "run"
    done = run_grpo([str(cfg), "--output-dir", str(run)], signals=[(signal.SIGTERM, 0.0)],
                    when=lambda _: len(metrics_steps(run)) >= 2)
    assert done.returncode == 143 and "Traceback" not in done.output, done.output
    step = int(re.search(r"after step (\d+):", done.output).group(1))
    assert 2 <= step < TOTAL
    checkpoint = run / "checkpoints" / f"step_{step}"

    assert main([str(cfg), "--output-dir", str(run), "--resume", str(checkpoint)]) == 0
    assert main([str(cfg), "--output-dir", str(tmp_path / "straight")]) == 0
    a = load_file(run / "checkpoints" / f"step_{TOTAL}" / "model.safetensors")
    b = load_file(tmp_path / "straight" / "checkpoints" / f"step_{TOTAL}" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    resumed, straight = _metrics(run), _metrics(tmp_path / "straight")
    assert sorted(resumed) == sorted(straight) == list(range(1, TOTAL + 1))
    assert resumed == straight
    assert all(m["env/turns_mean"] == 2 for m in straight.values())  # every episode had two turns
    assert any((m["optim/grad_norm"] or 0) > 0 for m in straight.values())  # the steps did learn something
