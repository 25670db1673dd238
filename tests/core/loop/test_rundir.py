"""Run directories: an earlier run is never reused by accident, interrupted checkpoint writes
are removed, and metrics.jsonl is cut back to the step a run resumes from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo_run.core.errors import UserError
from grpo_run.core.loop.rundir import prepare_run_dir, run_dir_of_resume_path, truncate_metrics


def _metrics(path: Path, steps: list[int]) -> None:
    path.write_text("".join(json.dumps({"step": s, "reward/mean": s / 10}) + "\n" for s in steps))


def test_an_existing_run_is_refused_unless_resumed_or_overwritten(tmp_path) -> None:
    run = tmp_path / "run"
    (run / "checkpoints" / "step_2").mkdir(parents=True)
    (run / "checkpoints" / "latest").write_text("step_2\n")
    (run / "config.toml").write_text("")
    _metrics(run / "metrics.jsonl", [1, 2])
    with pytest.raises(UserError) as caught:
        prepare_run_dir(run, run / "checkpoints", resume_step=None, overwrite=False)
    assert str(caught.value) == (
        f"{run} already holds a run (config.toml, metrics.jsonl, checkpoints/): pass --resume {run} to continue it, "
        f"or --overwrite to start it again (removes that run's files), or choose another --output-dir"
    )
    (run / "notes.txt").write_text("mine")
    assert prepare_run_dir(run, run / "checkpoints", resume_step=None, overwrite=True) == [
        f"--overwrite: removed the earlier run's files in {run}"]
    assert sorted(p.name for p in run.rglob("*")) == ["checkpoints", "notes.txt"]  # only grpo-run's files went


def test_an_empty_or_new_directory_is_fine(tmp_path) -> None:
    assert prepare_run_dir(tmp_path, tmp_path / "checkpoints", resume_step=None, overwrite=False) == []
    assert prepare_run_dir(tmp_path / "new", tmp_path / "new" / "checkpoints", resume_step=None, overwrite=False) == []
    assert (tmp_path / "new").is_dir()


def test_interrupted_checkpoint_writes_are_removed(tmp_path) -> None:
    ckpts = tmp_path / "checkpoints"
    for name in (".step_4.123.ab12cd34", ".step_2.old", "step_2"):
        (ckpts / name).mkdir(parents=True)
        (ckpts / name / "model.safetensors").write_bytes(b"x" * 10)
    notes = prepare_run_dir(tmp_path, ckpts, resume_step=2, overwrite=False)
    assert notes == [f"removed 2 unfinished checkpoint write(s) in {ckpts}: .step_2.old, .step_4.123.ab12cd34"]
    assert sorted(p.name for p in ckpts.iterdir()) == ["step_2"]


def test_metrics_are_cut_back_to_the_resumed_step(tmp_path) -> None:
    path = tmp_path / "metrics.jsonl"
    _metrics(path, [0, 1, 2, 3, 4])
    with path.open("a") as fh:
        fh.write('{"step": 5, "rew')  # cut short by a SIGKILL
    assert truncate_metrics(path, 2) == 3
    assert [json.loads(l)["step"] for l in path.read_text().splitlines()] == [0, 1, 2]
    assert (tmp_path / "metrics.discarded.jsonl").read_text().splitlines() == [
        json.dumps({"step": 3, "reward/mean": 0.3}), json.dumps({"step": 4, "reward/mean": 0.4}), '{"step": 5, "rew']
    assert truncate_metrics(path, 2) == 0


def test_the_run_directory_of_a_resume_path(tmp_path) -> None:
    run = tmp_path / "run"
    (run / "checkpoints" / "step_2").mkdir(parents=True)
    (run / "checkpoints" / "step_2" / "trainer_state.pt").write_bytes(b"")
    assert run_dir_of_resume_path(run / "checkpoints" / "step_2") == run
    assert run_dir_of_resume_path(run / "checkpoints") == run
    assert run_dir_of_resume_path(run) == run
    assert run_dir_of_resume_path(tmp_path / "elsewhere") is None
