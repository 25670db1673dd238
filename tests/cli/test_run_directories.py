"""What a user sees around run directories and checkpoints (docs/reliability.md): a second run
into a used directory is refused, a resume keeps each step once in metrics.jsonl, a damaged
newest checkpoint is passed over with a warning, old checkpoints are pruned, a full disk stops
the run with one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.processes import metrics_steps, subprocess_env
from support.runs import write_run
from support.verifiers import LENGTH_REWARD

from grpo_run.cli.main import main


def _config(tmp_path: Path, model_dir: Path, **sections) -> Path:
    return write_run(tmp_path, verifier=LENGTH_REWARD, train_rows=10, model={"name_or_path": str(model_dir)},
                     rollout={"num_samples_per_prompt_rollout": 3, "response_length": 5}, **sections)


def test_a_used_run_directory_is_refused_without_resume_or_overwrite(tmp_path, tiny_model_dir, capsys) -> None:
    cfg = _config(tmp_path, tiny_model_dir, train={"total_steps": 1})
    run = tmp_path / "run"
    assert main([str(cfg), "--output-dir", str(run)]) == 0
    capsys.readouterr()
    assert main([str(cfg), "--output-dir", str(run)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: {run} already holds a run (config.toml, metrics.jsonl, checkpoints/): pass --resume {run} to "
        f"continue it, or --overwrite to start it again (removes that run's files), or choose another --output-dir"
    ]
    assert metrics_steps(run) == [1]  # untouched
    assert main([str(cfg), "--output-dir", str(run), "--overwrite"]) == 0
    assert metrics_steps(run) == [1]  # started again, not appended
    with pytest.raises(SystemExit) as caught:
        main([str(cfg), "--output-dir", str(run), "--overwrite", "--resume", str(run)])
    assert caught.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_a_run_that_fails_before_its_first_step_does_not_block_the_retry(tmp_path, tiny_model_dir, capsys) -> None:
    cfg = _config(tmp_path, tiny_model_dir, train={"total_steps": 1})
    rows = (tmp_path / "train.jsonl").read_text()
    (tmp_path / "train.jsonl").write_text(rows + '{"prompt": ""}\n')  # a data error, found after the run dir exists
    run = tmp_path / "run"
    assert main([str(cfg), "--output-dir", str(run)]) == 2
    assert "'prompt' must be a non-empty string" in capsys.readouterr().err
    assert run.is_dir() and not (run / "config.toml").exists()  # its log.jsonl stays, with the failure
    assert "run_failed" in (run / "log.jsonl").read_text()
    (tmp_path / "train.jsonl").write_text(rows)
    assert main([str(cfg), "--output-dir", str(run)]) == 0  # no --overwrite needed
    assert metrics_steps(run) == [1]


def test_resuming_in_place_keeps_each_step_once(tmp_path, tiny_model_dir, capsys) -> None:
    cfg = _config(tmp_path, tiny_model_dir, train={"total_steps": 4}, checkpoint={"save_freq": 2})
    run = tmp_path / "run"
    assert main([str(cfg), "--output-dir", str(run)]) == 0
    capsys.readouterr()
    assert main([str(cfg), "--resume", str(run / "checkpoints" / "step_2")]) == 0  # run dir: the checkpoint's
    assert metrics_steps(run) == [1, 2, 3, 4]
    assert [json.loads(l)["step"] for l in (run / "metrics.discarded.jsonl").read_text().splitlines()] == [3, 4]
    assert "metrics.jsonl: moved 2 line(s) after step 2 to metrics.discarded.jsonl" in capsys.readouterr().err


def test_a_damaged_newest_checkpoint_is_passed_over_with_a_warning(tmp_path, tiny_model_dir, capsys) -> None:
    cfg = _config(tmp_path, tiny_model_dir, train={"total_steps": 4}, checkpoint={"save_freq": 2})
    run = tmp_path / "run"
    assert main([str(cfg), "--output-dir", str(run)]) == 0
    weights = run / "checkpoints" / "step_4" / "model.safetensors"
    size = weights.stat().st_size
    with weights.open("r+b") as fh:
        fh.truncate(size // 2)
    (run / "checkpoints" / ".step_6.999.deadbeef").mkdir()  # a write that was interrupted
    capsys.readouterr()
    assert main([str(cfg), "--resume", str(run), "--set", "train.total_steps=5"]) == 0
    err = capsys.readouterr().err
    step_2 = run / "checkpoints" / "step_2"
    assert (f"warning: checkpoint {run / 'checkpoints' / 'step_4'} is damaged (model.safetensors has {size // 2} "
            f"bytes, the manifest says {size}); resuming from {step_2} instead") in err
    assert f"removed 1 unfinished checkpoint write(s) in {run / 'checkpoints'}: .step_6.999.deadbeef" in err
    assert f"resumed from {step_2} at step 2" in err and "Traceback" not in err
    assert metrics_steps(run) == [1, 2, 3, 4, 5]


def test_keep_last_n_keeps_the_newest_checkpoints(tmp_path, tiny_model_dir) -> None:
    cfg = _config(tmp_path, tiny_model_dir, train={"total_steps": 4}, checkpoint={"save_freq": 1, "keep_last_n": 2})
    run = tmp_path / "run"
    assert main([str(cfg), "--output-dir", str(run)]) == 0
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["latest", "step_3", "step_4"]


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1) to mount a small tmpfs")
def test_a_full_disk_stops_the_run_in_one_line_and_keeps_the_previous_checkpoint(tmp_path, tiny_model_dir) -> None:
    if subprocess.run(["unshare", "-Urm", "true"], capture_output=True).returncode != 0:
        pytest.skip("user namespaces are not available here")
    cfg = _config(tmp_path, tiny_model_dir, train={"total_steps": 3}, checkpoint={"save_freq": 1},
                  logging={"progress": False, "level": "warning"})
    disk = tmp_path / "disk"
    disk.mkdir()
    run = disk / "run"
    # One checkpoint (~210 KiB) fits in 320 KiB, two do not.
    script = (f'mount -t tmpfs -o size=320k tmpfs "{disk}" && exec "{sys.executable}" -m grpo_run.cli.main '
              f'"{cfg}" --output-dir "{run}"')
    done = subprocess.run(["unshare", "-Urm", "sh", "-c", script], capture_output=True, text=True,
                          env=subprocess_env(), timeout=300)
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert lines[0] == f"grpo-run: run directory {run}"
    assert len(lines) == 2 and lines[1].startswith(f"run stopped: cannot write checkpoint {run}/checkpoints/step_2: "
                                                   f"no space left on device (")
    assert lines[1].endswith("of this checkpoint written); step_1 is still the latest checkpoint")
