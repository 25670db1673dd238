"""A loss plugin whose value is NaN on some steps, in a whole ``grpo-run`` run: those updates
are skipped (the weights stay as they were, finite), counted in ``optim/skipped_updates`` and
said once on the console; the run goes on training and no checkpoint ever holds a NaN or inf."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from support.runs import write_run
from support.verifiers import DIGIT_SHARE

from grpo_run.cli.main import main


def test_a_nan_loss_skips_its_updates_and_the_run_goes_on(tmp_path: Path, tiny_model_dir: Path, capsys) -> None:
    cfg = write_run(
        tmp_path, verifier=DIGIT_SHARE, model={"name_or_path": str(tiny_model_dir)},
        loss={"name": "support.poison_loss:PoisonedLoss", "calls": [2, 3]},  # one update per step: steps 2 and 3
        train={"total_steps": 4}, checkpoint={"save_freq": 1},
    )
    out = tmp_path / "out"
    assert main([str(cfg), "--output-dir", str(out)]) == 0
    err = capsys.readouterr().err
    metrics = {m["step"]: m for m in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())}
    assert [metrics[s]["optim/skipped_updates"] for s in (1, 2, 3, 4)] == [0.0, 1.0, 1.0, 0.0]
    assert metrics[2]["loss/total"] is None  # NaN in the metrics file
    # said once, for the first skip
    assert err.count("the learner skipped") == 1, err
    assert ("warning: step 2: the learner skipped 1 update: the loss or its gradient was not finite (NaN or inf), "
            "so the weights were left as they were") in err
    weights = {s: load_file(out / "checkpoints" / f"step_{s}" / "model.safetensors") for s in (1, 2, 3, 4)}
    assert all(torch.isfinite(t).all() for w in weights.values() for t in w.values())
    assert all(torch.equal(weights[1][k], weights[3][k]) for k in weights[1])  # steps 2 and 3 changed nothing
    assert any(not torch.equal(weights[3][k], weights[4][k]) for k in weights[3])  # step 4 trained
    assert (out / "checkpoints" / "latest").read_text() == "step_4\n"
