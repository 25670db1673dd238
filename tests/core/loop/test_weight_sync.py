"""LoRA runs whose engine receives the adapter instead of the merged model (``model.lora.sync``),
on the ``hf`` engine, through the CLI: the same samples as merged sync, a fraction of the bytes,
the engine's log-probs equal to the learner's, a resume that hands the engine the checkpoint's
adapter, and a corrupt adapter that stops the run naming the engine with its checkpoints intact.
The vLLM engine's runs are tests/plugins/engines/test_vllm_lora.py (heavy)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo_run.cli.main import main
from support.paths import EXAMPLES
from support.runs import write_run
from support.shapes import smollm2_shaped
from support.verifiers import LENGTH_REWARD

pytest.importorskip("peft", reason="LoRA needs the peft extra (pip install 'grpo-run[peft]')")

EXAMPLE = str(EXAMPLES / "arithmetic.toml")
QUIET = ["--set", "logging.progress=false", "--set", "train.num_threads=1"]


def rows_of(run: Path) -> dict[int, dict]:
    return {r["step"]: r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())}


def sync_events(run: Path) -> list[dict]:
    events = map(json.loads, (run / "log.jsonl").read_text().splitlines())
    return [e for e in events if e["event"] == "lora_sync"]


def test_the_embedded_example_syncs_a_fraction_of_the_bytes_with_the_same_first_step(tmp_path):
    # The check the issue holds us to: r=8 (all linear layers), 3 steps, both modes.
    runs = {}
    for mode in ("adapter", "merged"):
        runs[mode] = tmp_path / mode
        assert main([EXAMPLE, "--output-dir", str(runs[mode]), *QUIET, "--set", "model.lora.r=8",
                     "--set", f"model.lora.sync={mode}", "--set", "train.total_steps=3"]) == 0
        assert [(e["mode"], e["engine"]) for e in sync_events(runs[mode])] == [(mode, "hf")]
    adapter, merged = rows_of(runs["adapter"]), rows_of(runs["merged"])
    assert adapter[1]["reward/mean"] == merged[1]["reward/mean"]
    sent = {mode: [rows[s]["perf/weight_sync_bytes"] for s in (1, 2, 3)] for mode, rows in
            (("adapter", adapter), ("merged", merged))}
    # Step 1 generated with the starting weights: its sync comes before batch 2.
    assert sent["adapter"][0] == sent["merged"][0] == 0
    # tiny-arithmetic: 4 layers x r=8 x (4 x (128+128) + 3 x (128+512)) params x 4 bytes = 376,832;
    # the merged model is 1,070,976 params x 4 bytes.
    assert sent["adapter"][1:] == [376_832, 376_832]
    assert sent["merged"][1:] == [4_283_904, 4_283_904]
    assert sum(sent["adapter"]) <= 0.15 * sum(sent["merged"])


def five_steps(tmp_path: Path, model: dict, name: str) -> dict[str, dict[int, dict]]:
    """Both sync modes, 5 steps, the engine's log-probs compared with the learner's (token ratios)."""
    out = {}
    for mode in ("adapter", "merged"):
        cfg = write_run(
            tmp_path, verifier=LENGTH_REWARD, name=f"{name}-{mode}.toml",
            model={**model, "lora": {**model.get("lora", {}), "sync": mode}},
            rollout={"num_samples_per_prompt_rollout": 4, "response_length": 8},
            algorithm={"mismatch_correction": "token-truncate"},
            optim={"lr": 1e-2}, train={"total_steps": 5},
        )
        assert main([str(cfg), "--output-dir", str(tmp_path / f"{name}-{mode}"), *QUIET]) == 0
        out[mode] = rows_of(tmp_path / f"{name}-{mode}")
    return out


@pytest.mark.parametrize("shape", ["embedded", "smollm2"])
def test_adapter_sync_samples_as_merged_sync_and_the_engine_agrees_with_the_learner(tmp_path, shape):
    if shape == "embedded":
        model = {"name_or_path": "tiny-arithmetic", "lora": {"r": 8}}
    else:
        model = {"name_or_path": str(smollm2_shaped(tmp_path / "smollm2-shaped")),
                 "lora": {"r": 8, "target_modules": ["q_proj", "v_proj"]}}
    runs = five_steps(tmp_path, model, shape)
    adapter, merged = runs["adapter"], runs["merged"]
    assert adapter[1]["reward/mean"] == merged[1]["reward/mean"]
    for step in range(1, 6):
        # |log pi_learner - log pi_engine| per sampled token: the same bound as merged sync meets.
        assert merged[step]["mismatch/log_rho_abs_mean"] < 1e-5, merged[step]
        assert adapter[step]["mismatch/log_rho_abs_mean"] < 1e-5, adapter[step]
    assert adapter[5]["perf/weight_sync_bytes"] < merged[5]["perf/weight_sync_bytes"] / 10
    # The adapter moved: without the syncs the engine would sample from the base model throughout.
    assert any(adapter[s]["reward/mean"] != adapter[1]["reward/mean"] for s in range(2, 6))


def test_a_resumed_adapter_run_continues_as_the_uninterrupted_one(tmp_path, tiny_model_dir):
    cfg = write_run(
        tmp_path, verifier=LENGTH_REWARD, train_rows=10,
        model={"name_or_path": str(tiny_model_dir), "lora": {"r": 4, "alpha": 8}},
        rollout={"num_samples_per_prompt_rollout": 3, "response_length": 5},
        optim={"lr": 1e-2}, train={"total_steps": 4}, checkpoint={"save_freq": 2},
    )
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    assert main([str(cfg), "--output-dir", str(full), *QUIET]) == 0
    assert main([str(cfg), "--output-dir", str(resumed), *QUIET, "--resume", str(full / "checkpoints" / "step_2")]) == 0
    assert [e["mode"] for e in sync_events(resumed)] == ["adapter"]
    # Batches 3 and 4 come from the engine holding the checkpoint's adapter, as they did in the full run.
    a, b = rows_of(full), rows_of(resumed)
    for step in (3, 4):
        assert b[step]["reward/mean"] == a[step]["reward/mean"]
        assert b[step]["loss/policy"] == a[step]["loss/policy"]


def test_a_corrupt_adapter_stops_the_run_naming_the_engine_and_the_checkpoints_stay_usable(tmp_path, capsys,
                                                                                          monkeypatch):
    import attrs
    import grpo_run.core.learner.lora as lora

    taken = lora.adapter_snapshot
    calls = []

    def corrupt_second(*args):
        adapter = taken(*args)
        calls.append(1)
        if len(calls) < 2:
            return adapter
        name = sorted(adapter.tensors)[0]  # a lora_A cut short: as if the bytes were torn
        return attrs.evolve(adapter, tensors={**adapter.tensors, name: adapter.tensors[name][:1]})

    monkeypatch.setattr(lora, "adapter_snapshot", corrupt_second)
    run = tmp_path / "run"
    args = [EXAMPLE, "--output-dir", str(run), *QUIET, "--set", "model.lora.r=4", "--set", "train.total_steps=4",
            "--set", "checkpoint.save_freq=1", "--set", "train.local_eval_every=0"]
    assert main(args) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "engine 'hf': weight sync for step 2 failed: ValueError: adapter 'policy' does not fit its config (r = 4): " \
           "wrong shape for base_model.model.model.layers.0.mlp.down_proj.lora_A.weight" in err, err
    assert "Traceback" not in err
    saved = sorted(p.name for p in (run / "checkpoints").glob("step_*"))
    assert saved == ["step_1", "step_2"]
    monkeypatch.setattr(lora, "adapter_snapshot", taken)
    # The newest checkpoint is whole: the run goes on from it.
    assert main([*args, "--resume", str(run / "checkpoints" / "step_2"), "--output-dir", str(tmp_path / "resumed")]) == 0
    assert sorted(rows_of(tmp_path / "resumed")) == [3, 4]
