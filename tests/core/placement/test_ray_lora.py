"""A LoRA run on a local Ray instance (``heavy``): the learner's adapter reaches the engine actors
through the object store, and the run samples what merged sync samples."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import REPO

pytestmark = [pytest.mark.heavy, pytest.mark.slow]
pytest.importorskip("ray")
pytest.importorskip("peft")


def run_on_ray(run: Path, mode: str) -> dict[int, dict]:
    env = {**os.environ, "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    env.pop("RAY_ADDRESS", None)  # a local instance of its own
    proc = subprocess.run(
        [sys.executable, "-m", "grpo_run.cli.main", "examples/arithmetic.toml", "--output-dir", str(run),
         "--set", "distributed.backend=ray", "--set", "engine.num_engines=2", "--set", "model.lora.r=8",
         "--set", f"model.lora.sync={mode}", "--set", "train.total_steps=3", "--set", "train.local_eval_every=0",
         "--set", "logging.progress=false"],
        cwd=REPO, env=env, text=True, capture_output=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    assert [e["mode"] for e in events if e["event"] == "lora_sync"] == [mode]
    return {r["step"]: r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())}


def test_the_adapter_travels_through_the_object_store_to_two_engine_actors(tmp_path):
    adapter, merged = run_on_ray(tmp_path / "adapter", "adapter"), run_on_ray(tmp_path / "merged", "merged")
    assert [adapter[s]["perf/weight_sync_bytes"] for s in (2, 3)] == [376_832, 376_832]
    assert [merged[s]["perf/weight_sync_bytes"] for s in (2, 3)] == [4_283_904, 4_283_904]
    # Both engine actors sampled with the new adapter: the same batches as with merged weights.
    assert [adapter[s]["reward/mean"] for s in (1, 2, 3)] == [merged[s]["reward/mean"] for s in (1, 2, 3)]
