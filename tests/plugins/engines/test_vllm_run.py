"""Whole runs with the vllm engine: `examples/arithmetic.toml --set engine.name=vllm` learns, with
and without in-flight weight updates; an engine worker that dies or hangs mid-run ends the run
with a clear error naming the engine (exit 1, no hang)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.paths import EXAMPLES
from support.vllm import PYTHON_ENV, signal_process, vllm_python, wait_for, worker_pids_of
from grpo_run.cli.main import main

pytestmark = pytest.mark.heavy

EXAMPLE = EXAMPLES / "arithmetic.toml"
GRPO_RUN = Path(sys.executable).parent / "grpo-run"


def _evals(out: Path) -> list[tuple[int, float]]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["eval/accuracy"]) for r in rows if "eval/accuracy" in r]


def _events(out: Path) -> dict[str, dict]:
    return {e["event"]: e for e in map(json.loads, (out / "log.jsonl").read_text().splitlines())}


def _learns(out: Path, *overrides: str) -> list[dict]:
    code = main([str(EXAMPLE), "--output-dir", str(out), "--set", "engine.name=vllm",
                 "--set", "train.max_runtime_s=300", "--set", "logging.progress=false", *overrides])
    assert code == 0
    evals = _evals(out)
    assert evals[0][0] == 0 and evals[0][1] <= 0.5, evals
    assert max(acc for _, acc in evals) >= 0.9, evals
    events = _events(out)
    assert events["vllm_engine_started"]["vllm_version"]
    closed = events["vllm_engine_closed"]
    assert closed["completions"] > 0 and closed["tokens"] > 0 and closed["weight_syncs"] >= 1, closed
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_arithmetic_learns_with_the_vllm_engine(tmp_path, monkeypatch):
    monkeypatch.setenv(PYTHON_ENV, vllm_python())
    rows = _learns(tmp_path / "run")
    steps = [r for r in rows if r["step"] > 0]
    assert all(r["perf/weight_sync_s"] >= 0 for r in steps)
    assert any(r["perf/weight_sync_s"] > 0 for r in steps)
    assert all(r["rollout/staleness_max"] == 0 and r["rollout/mixed_version_rate"] == 0 for r in steps)


def test_arithmetic_learns_with_inflight_updates(tmp_path, monkeypatch):
    monkeypatch.setenv(PYTHON_ENV, vllm_python())
    rows = _learns(tmp_path / "run", "--set", "engine.inflight_updates=true", "--set", "rollout.async_steps=2")
    steps = [r for r in rows if r["step"] > 0]
    assert all(r["rollout/staleness_max"] <= 1 and r["rollout/version_span_max"] <= 1 for r in steps)


def _start_run(tmp_path: Path, *overrides: str) -> tuple[subprocess.Popen, Path]:
    out = tmp_path / "run"
    env = {**os.environ, PYTHON_ENV: vllm_python()}
    proc = subprocess.Popen(
        [str(GRPO_RUN), str(EXAMPLE), "--output-dir", str(out), "--set", "engine.name=vllm",
         "--set", "logging.progress=false", "--set", "train.stop_at_eval_accuracy=0", *overrides],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    return proc, out


def _after_first_step(proc: subprocess.Popen, out: Path) -> int:
    metrics = out / "metrics.jsonl"
    wait_for(lambda: metrics.exists() and '"step": 1' in metrics.read_text(), 240, "the first training step")
    return wait_for(lambda: worker_pids_of(proc.pid), 10, "the engine worker")[0]


def test_a_worker_killed_mid_run_ends_the_run_with_an_error_naming_the_engine(tmp_path):
    proc, out = _start_run(tmp_path)
    try:
        signal_process(_after_first_step(proc, out), signal.SIGKILL)
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 1, stderr
    assert "vllm engine" in stderr and "was killed by signal 9" in stderr, stderr
    assert "with the weights of step" in stderr or "weight sync for step" in stderr, stderr
    assert "Traceback" not in stderr


def test_a_worker_that_hangs_mid_run_ends_the_run_within_its_timeouts(tmp_path):
    proc, out = _start_run(tmp_path, "--set", "engine.weight_sync_timeout_s=5", "--set", "engine.response_timeout_s=5")
    worker = None
    try:
        worker = _after_first_step(proc, out)
        signal_process(worker, signal.SIGSTOP)
        start = time.monotonic()
        _, stderr = proc.communicate(timeout=60)
        elapsed = time.monotonic() - start
    finally:
        proc.kill()
        if worker is not None and worker_pids_of(proc.pid) == [worker]:
            signal_process(worker, signal.SIGKILL)
    assert proc.returncode == 1, stderr
    assert elapsed < 30, elapsed
    assert "vllm engine" in stderr and ("engine.weight_sync_timeout_s = 5" in stderr
                                        or "engine.response_timeout_s = 5" in stderr), stderr
    assert "Traceback" not in stderr
