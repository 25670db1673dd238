"""Whole training runs through the CLI: files written, a third-party verifier used from TOML,
metrics and checkpoints where the design says."""

from __future__ import annotations

import json
from pathlib import Path

from transformers import AutoModelForCausalLM

from support.runs import write_run

from grpo_run.cli.main import main


def _config(tmp_path: Path, verifier: str, verifier_config: dict | None = None, **sections) -> Path:
    """40 train and 6 eval rows, 3 steps, eval every 2, a checkpoint every 2 steps."""
    return write_run(
        tmp_path, verifier=verifier, verifier_config=verifier_config, train_rows=40, eval_rows=6,
        rollout={"num_unique_prompts_rollout": 4, "response_length": 4},
        algorithm={"pack_length": 64}, train={"total_steps": 3, "local_eval_every": 2},
        checkpoint={"save_freq": 2}, scoring=None, **sections,
    )


def test_run_with_third_party_verifier_writes_run_directory(tmp_path):
    cfg = _config(tmp_path, "exact-match", {"case_sensitive": False})
    out = tmp_path / "out"
    assert main([str(cfg), "--output-dir", str(out), "--set", "rollout.async_steps=2"]) == 0
    lines = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
    assert [l["step"] for l in lines] == [0, 1, 2, 3]
    assert "eval/accuracy" in lines[0] and "eval/accuracy" in lines[2] and "eval/accuracy" in lines[3]
    assert "verifier/exact-match/mean_score" in lines[1]
    assert all(l["rollout/staleness_max"] <= 1 for l in lines[1:])
    effective = (out / "config.toml").read_text()
    assert "[verifiers.exact-match]" in effective and "case_sensitive = false" in effective
    assert "async_steps = 2" in effective
    ckpts = sorted(p.name for p in (out / "checkpoints").iterdir() if not p.name.startswith("."))
    assert ckpts == ["latest", "step_2", "step_3"]
    model = AutoModelForCausalLM.from_pretrained(out / "checkpoints" / "step_3")
    assert model.config.model_type == "llama"
    events = [json.loads(l)["event"] for l in (out / "log.jsonl").read_text().splitlines()]
    assert "run_built" in events and events[-1] == "run_end"


def test_synchronous_run_has_zero_staleness_and_kl(tmp_path):
    cfg = _config(tmp_path, "exact-match", kl={"beta": 0.05})
    out = tmp_path / "out"
    assert main([str(cfg), "--output-dir", str(out), "--set", "train.local_eval_every=0"]) == 0
    lines = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
    assert [l["step"] for l in lines] == [1, 2, 3]
    assert all(l["rollout/staleness_max"] == 0 for l in lines)
    assert all("loss/kl" in l for l in lines)
    assert lines[0]["loss/kl"] == 0.0 or abs(lines[0]["loss/kl"]) < 1e-6  # policy == reference at step 1


def test_data_error_names_the_line(tmp_path, capsys):
    cfg = _config(tmp_path, "exact-match")
    with (tmp_path / "train.jsonl").open("a") as fh:
        fh.write("{not json\n")
    assert main([str(cfg), "--output-dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "train.jsonl:41: invalid JSON" in err and "Traceback" not in err
