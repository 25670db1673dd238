"""``grpo_run.sweep`` from Python: the variants of a config with a plain reward function whose
weight varies (each variant's rewards are its own), a variation refused before anything loads,
a finished sweep found complete when resumed, and docs/lora.md's example as a script file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import grpo_run
from support.paths import DOCS, EXAMPLES
from support.runs import write_run
from support.verifiers import LENGTH_REWARD

pytest.importorskip("peft", reason="a sweep trains LoRA adapters (pip install 'grpo-run[peft]')")
pytestmark = pytest.mark.timeout(300)


def has_digit(completion, ground_truth, row):
    return float(any(c.isdigit() for c in completion))


def _config(tmp_path: Path, model_dir: Path) -> Path:
    return write_run(tmp_path, verifier=LENGTH_REWARD, model={"name_or_path": str(model_dir), "lora": {"r": 4}},
                     train={"total_steps": 2, "local_eval_every": 0, "num_threads": 1})


def test_a_sweep_over_a_reward_functions_weight(tmp_path, tiny_model_dir) -> None:
    result = grpo_run.sweep(_config(tmp_path, tiny_model_dir), vary={"verifiers.has_digit.weight": [1.0, 3.0]},
                            reward_funcs=[has_digit], output_dir=tmp_path / "sweep")

    assert isinstance(result, grpo_run.SweepResult) and result.sweep_dir == tmp_path / "sweep"
    assert [v.name for v in result.variants] == ["weight-1.0", "weight-3.0"]
    one, three = result.variants
    for variant in result.variants:
        assert (variant.status, variant.reason) == ("completed", None)
        assert variant.checkpoint == variant.run_dir / "checkpoints" / "step_2"
        assert variant.run_dir == tmp_path / "sweep" / variant.name
    assert one.overrides == {"verifiers.has_digit.weight": 1.0}
    # The same seed samples the same step-1 completions: the function's share of the reward triples.
    first = [json.loads((v.run_dir / "metrics.jsonl").read_text().splitlines()[0]) for v in (one, three)]
    digits = [m["verifier/has_digit/mean_score"] for m in first]
    length = [m["verifier/support.verifiers:LengthReward/mean_score"] for m in first]
    assert digits[0] == digits[1] and length[0] == length[1]
    assert first[1]["reward/mean"] == pytest.approx(first[0]["reward/mean"] + 2 * digits[0])

    again = grpo_run.sweep(_config(tmp_path, tiny_model_dir), reward_funcs=[has_digit], resume=tmp_path / "sweep")
    assert [(v.name, v.status) for v in again.variants] == [("weight-1.0", "completed"), ("weight-3.0", "completed")]


def test_a_variation_of_what_the_variants_share_raises_before_anything_loads(tmp_path, tiny_model_dir) -> None:
    with pytest.raises(grpo_run.UserError) as e:
        grpo_run.sweep(_config(tmp_path, tiny_model_dir), vary={"model.dtype": ["float32", "bfloat16"]},
                       output_dir=tmp_path / "sweep")
    assert str(e.value) == "--vary: model.dtype: cannot vary in a sweep: the variants share one base model, held once"
    assert not (tmp_path / "sweep").exists()


def test_the_docs_sweep_example_runs_as_a_script_file(tmp_path) -> None:
    text = (DOCS / "lora.md").read_text(encoding="utf-8")
    start = text.index("```python\n") + len("```python\n")
    script = text[start:text.index("```", start)]
    assert "grpo_run.sweep(\n    \"examples/arithmetic.toml\"" in script
    (tmp_path / "examples").mkdir()
    shutil.copy(EXAMPLES / "arithmetic.toml", tmp_path / "examples")
    (tmp_path / "sweep.py").write_text(script, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}  # the tested tree, in the child too
    proc = subprocess.run([sys.executable, "sweep.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)

    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr + proc.stdout
    names = ["lr-0.001_seed-1", "lr-0.001_seed-2", "lr-0.003_seed-1", "lr-0.003_seed-2"]
    printed = [line.split() for line in proc.stdout.splitlines()]
    assert [p[:2] for p in printed] == [[name, "completed"] for name in names]
    sweep = tmp_path / "runs" / "arithmetic-sweep"
    entries = json.loads((sweep / "sweep.json").read_text())["variants"]
    assert [(e["name"], e["status"], e["step"]) for e in entries] == [(name, "completed", 3) for name in names]
    for name in names:
        assert (sweep / name / "checkpoints" / "step_3" / "adapter_model.safetensors").is_file()
