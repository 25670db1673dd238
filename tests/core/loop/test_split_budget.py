"""Runs whose memory plan splits the budget start and train: the planner probes the learner on fake
tensors (the generous bound does not fit ``learner.max_memory_gib``), with LoRA on, with batches
generated ahead (``rollout.async_steps = 2``, where generation's memory sits beside the learner's
on the CPU), both together, and twice in one process as a notebook would run them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import EXAMPLES

pytest.importorskip("peft", reason="LoRA needs the peft extra (pip install 'grpo-run[peft]')")

SMALL = ["--set", "train.total_steps=2", "--set", "train.local_eval_every=0", "--set", "checkpoint.save_freq=0",
         "--set", "logging.progress=false", "--set", "learner.max_memory_gib=0.3"]
"""A limit far below what even the generous bound needs: the planner probes the learner."""


def _train(tmp_path: Path, *overrides: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "grpo_run", str(EXAMPLES / "arithmetic.toml"), "--output-dir", str(out),
                           *SMALL, *overrides], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return done, [m for m in metrics if "perf/micro_batches" in m]


@pytest.mark.parametrize("overrides", [
    ["--set", "rollout.async_steps=2"],
    ["--set", "model.lora.r=8"],
    ["--set", "model.lora.r=8", "--set", "rollout.async_steps=2"],
], ids=["async", "lora", "lora-async"])
def test_a_run_with_a_split_budget_trains(tmp_path: Path, overrides: list[str]) -> None:
    done, steps = _train(tmp_path, *overrides)
    assert [m["step"] for m in steps] == [1, 2]
    assert "token budget" in done.stdout + done.stderr  # the planner chose one: the probe ran
    assert all(m["perf/micro_batches"] >= 2 for m in steps)  # the budget split every mini-batch
    assert all(m["perf/planned_memory_gib"] > 0 for m in steps)


def test_a_fixed_budget_with_lora_trains_where_the_plan_probes(tmp_path: Path) -> None:
    _, steps = _train(tmp_path, "--set", "model.lora.r=8", "--set", "learner.max_tokens_per_forward=512")
    assert len(steps) == 2 and all(m["perf/micro_batches"] >= 2 for m in steps)  # up to 3,072 tokens, 512 a forward


def test_lora_plans_and_trains_twice_in_one_process(tmp_path: Path) -> None:
    """The notebook's path: ``grpo_run.train`` twice in one interpreter, each run probing its
    learner with LoRA on fake tensors, then ``grpo-run plan`` of the same config."""
    script = tmp_path / "twice.py"
    script.write_text(f"""
import json, sys
import grpo_run
from grpo_run.cli.main import main
for i in range(2):
    grpo_run.train({str(EXAMPLES / "arithmetic.toml")!r}, output_dir={str(tmp_path)!r} + f"/run{{i}}",
                   model={{"lora": {{"r": 8}}}}, train={{"total_steps": 1, "local_eval_every": 0}},
                   checkpoint={{"save_freq": 0}}, logging={{"progress": False}}, learner={{"max_memory_gib": 0.3}})
sys.exit(main(["plan", {str(EXAMPLES / "arithmetic.toml")!r}, "--set", "model.lora.r=16", "--json"]))
""")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    plan = json.loads(done.stdout.strip().splitlines()[-1])
    assert plan["fits"] and "LoRA adapters" in json.dumps(plan["processes"][0]["resident"])
    for i in range(2):
        rows = [json.loads(line) for line in (tmp_path / f"run{i}" / "metrics.jsonl").read_text().splitlines()]
        assert any(r.get("perf/micro_batches", 0) >= 2 for r in rows)
