"""SIGTERM, Ctrl-C and a second Ctrl-C on a real ``grpo-run`` process, as a user or a scheduler
sends them (docs/reliability.md): the exact lines printed, the exit code, no traceback, no
process left behind, and a checkpoint that resumes to the same weights as an uninterrupted run.

Each test starts ``grpo-run`` in a session of its own and signals only that process.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from support import faulty_verifiers as faulty
from support.processes import metrics_steps, run_grpo
from support.runs import write_run

from grpo_run.cli.main import main

pytestmark = pytest.mark.timeout(600)


def _config(tmp_path: Path, model_dir: Path, verifier: type, **sections) -> Path:
    return write_run(
        tmp_path, verifier=faulty.path(verifier), train_rows=12, eval_rows=3,
        model={"name_or_path": str(model_dir)},
        rollout={"num_samples_per_prompt_rollout": 3, "response_length": 5},
        optim={"lr": 1e-3},
        **{"train": {"total_steps": 6, "local_eval_every": 1}, "scoring": {"num_workers": 1}, **sections},
    )


def _started(output: str) -> bool:
    return "run directory" in output


def test_sigterm_saves_an_exact_checkpoint_and_resuming_matches_an_uninterrupted_run(tmp_path, tiny_model_dir) -> None:
    cfg = _config(tmp_path, tiny_model_dir, faulty.Slow)
    run = tmp_path / "run"
    done = run_grpo([str(cfg), "--output-dir", str(run)], signals=[(signal.SIGTERM, 0.0)],
                    when=lambda _: len(metrics_steps(run)) >= 3)  # steps 0 (eval), 1, 2 done

    assert done.returncode == 143 and "Traceback" not in done.output and done.leftovers == []
    step = int(re.search(r"after step (\d+):", done.output).group(1))
    checkpoint = run / "checkpoints" / f"step_{step}"
    # The signal lands while step 2's console line may still be on its way (its metrics are
    # written first), so the step line can come after the "received" line; the two last do not move.
    received = "SIGTERM received: stopping safely and saving a checkpoint (send SIGTERM again to exit at once)"
    assert done.lines.count(received) == 1 and done.lines.index(received) >= len(done.lines) - 4
    assert done.lines[-2:] == [
        f"interrupted by SIGTERM after step {step}: checkpoint {checkpoint}",
        f"resume with: grpo-run train {cfg} --output-dir {run} --resume {checkpoint}",
    ]
    assert all(line.startswith("step ") for line in done.lines[done.lines.index(received) + 1:-2])
    assert 2 <= step < 6 and metrics_steps(run) == list(range(step + 1))  # the last step's metrics kept

    # The printed command, run as printed, finishes the run; it equals one never interrupted.
    assert main([str(cfg), "--output-dir", str(run), "--resume", str(checkpoint)]) == 0
    assert main([str(cfg), "--output-dir", str(tmp_path / "straight")]) == 0
    a = load_file(run / "checkpoints" / "step_6" / "model.safetensors")
    b = load_file(tmp_path / "straight" / "checkpoints" / "step_6" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert metrics_steps(run) == list(range(7))  # each step once


def test_ctrl_c_while_a_verifier_hangs_stops_well_within_the_timeout(tmp_path, tiny_model_dir) -> None:
    cfg = _config(tmp_path, tiny_model_dir, faulty.Hang, scoring={"num_workers": 1, "timeout_s": 60})
    run = tmp_path / "run"
    done = run_grpo([str(cfg), "--output-dir", str(run)], when=_started, signals=[(signal.SIGINT, 8.0)])

    assert done.returncode == 130 and "Traceback" not in done.output and done.leftovers == []
    assert done.seconds_after_signal < 15  # the hung call's limit is 60 s
    assert done.lines[-3:] == [
        "SIGINT received: stopping safely and saving a checkpoint (press Ctrl-C again to exit at once)",
        "interrupted by SIGINT before the first step finished: nothing to save",
        f"start again with: grpo-run train {cfg} --output-dir {run} --overwrite",
    ]


def test_a_second_ctrl_c_exits_at_once_and_quietly(tmp_path, tiny_model_dir) -> None:
    # An async verifier blocking the event loop for 120 s: the first Ctrl-C cannot take effect.
    cfg = _config(tmp_path, tiny_model_dir, faulty.BlocksLoopLong, scoring={"num_workers": 1, "timeout_s": 200})
    run = tmp_path / "run"
    done = run_grpo([str(cfg), "--output-dir", str(run)], when=lambda out: "has blocked the event loop" in out,
                    signals=[(signal.SIGINT, 0.5), (signal.SIGINT, 1.5)])

    assert done.returncode == 130 and "Traceback" not in done.output and done.leftovers == []
    assert done.seconds_after_signal < 5  # 1 s between the two, then at once
    assert done.lines[-2:] == [
        "SIGINT received: stopping safely and saving a checkpoint (press Ctrl-C again to exit at once)",
        "SIGINT again: exiting at once without saving",
    ]


@pytest.mark.parametrize(
    ("verifier", "message"),
    [
        (faulty.Abort, "worker process died (exit code -6)"),
        (faulty.RaisesKeyboardInterrupt, "raised KeyboardInterrupt: "),
        (faulty.Exit, "raised SystemExit: 3"),
    ],
)
def test_a_verifier_that_kills_its_worker_or_raises_stops_the_run_in_one_line(tmp_path, tiny_model_dir, verifier, message) -> None:
    cfg = _config(tmp_path, tiny_model_dir, verifier, train={"total_steps": 6, "local_eval_every": 0},
                  scoring={"num_workers": 1, "error_min_calls": 6, "error_window": 6})
    done = run_grpo([str(cfg), "--output-dir", str(tmp_path / "run")])

    assert done.returncode == 1 and "Traceback" not in done.output and done.leftovers == []
    name = faulty.path(verifier)
    assert len(done.lines) == 2 and re.fullmatch(
        re.escape(f"run stopped: verifier {name!r} failed 6 of its last 6 calls (100%, above scoring.max_error_rate "
                  f"= 0.5); last error (row ") + r"'train-\d+'" + re.escape(f"): {message}. Fix the verifier, its "
                  f"config or the data, or raise scoring.max_error_rate (1.0 disables this check)"),
        done.lines[1],
    ), done.output


def test_a_verifier_that_cannot_be_built_stops_the_run_in_one_line(tmp_path, tiny_model_dir) -> None:
    cfg = _config(tmp_path, tiny_model_dir, faulty.InitFails)
    done = run_grpo([str(cfg), "--output-dir", str(tmp_path / "run")])

    assert done.returncode == 1 and "Traceback" not in done.output and done.leftovers == []
    assert done.lines[1:] == [
        "run stopped: a scoring worker could not start its verifiers: ValueError: cannot find my model"
    ]
