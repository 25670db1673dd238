"""The command line: check, --set, exit codes, and no tracebacks for user mistakes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import EXAMPLES
from grpo_run.cli.main import main

EXAMPLE = EXAMPLES / "arithmetic.toml"


def test_check_valid_example(capsys):
    assert main(["check", str(EXAMPLE)]) == 0
    assert "ok" in capsys.readouterr().out


def test_check_reports_every_error_with_key_paths(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text(
        EXAMPLE.read_text()
        .replace("temperature = 1.0", "temprature = 1.0")
        .replace('name = "dapo"', 'name = "dapoo"')
        .replace("lr = 3e-4", "lr = -1.0")
    )
    assert main(["check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.toml: rollout.temprature: unknown key (did you mean 'temperature'?)" in err
    assert "loss.name: no loss named 'dapoo' (did you mean 'dapo'?)" in err
    assert "optim.lr: must be > 0" in err
    assert "Traceback" not in err


def test_set_overrides_are_applied_and_checked(capsys):
    assert main(["check", str(EXAMPLE), "--set", "rollout.async_steps=2", "--set", "loss.clip_higher=0.3"]) == 0
    assert main(["check", str(EXAMPLE), "--set", "rollout.response_length=1000"]) == 2
    err = capsys.readouterr().err
    assert "pack_length" in err and "response_length" in err


def test_missing_file_is_a_clear_error(capsys):
    assert main(["check", "no/such/config.toml"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_console_script_exit_code_without_traceback(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[rollout\nx = 1\n")
    proc = subprocess.run(
        [sys.executable, "-m", "grpo_run.cli.main", "check", str(bad)], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "line 1" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("argv", [["train", str(EXAMPLE), "--set", "model.dtype=float64"]])
def test_train_rejects_bad_config_before_loading_a_model(argv, capsys):
    assert main(argv) == 2
    assert "model.dtype" in capsys.readouterr().err


def test_user_text_in_messages_is_printed_literally(tmp_path):
    # A hint in brackets is TOML, not console markup: "[verifiers.math]" must reach the user.
    cfg = tmp_path / "no_verifier.toml"
    cfg.write_text('[task]\nname = "arithmetic"\n')
    proc = subprocess.run([sys.executable, "-m", "grpo_run.cli.main", "check", str(cfg)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "verifiers: no verifier enabled; add a table such as [verifiers.math]" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_misspelt_key_is_an_error_with_a_suggestion(tmp_path, capsys):
    # logging.log_rollouts_every is read now (rollout traces); a near miss is still an error.
    cfg = tmp_path / "c.toml"
    cfg.write_text(EXAMPLE.read_text() + "\n[logging]\nlog_rollout_every = 5\n")
    assert main(["check", str(cfg)]) == 2
    assert "logging.log_rollout_every: unknown key (did you mean 'log_rollouts_every'?)" in capsys.readouterr().err


def test_a_train_only_config_runs_with_the_defaults(tmp_path, capsys):
    # Only [[data.train]]: the default train.local_eval_every asks for no eval rows; evaluation is off, and said so.
    from support.runs import write_run
    from support.verifiers import LENGTH_REWARD

    cfg = write_run(tmp_path, verifier=LENGTH_REWARD, train={"local_eval_every": None, "total_steps": 1},
                    model={"name_or_path": "tiny-arithmetic"})
    assert "local_eval_every" not in cfg.read_text()
    assert main(["check", str(cfg)]) == 0
    assert main([str(cfg), "--output-dir", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err
    assert "warning: no [[data.eval]] source, so evaluation is off (no eval/accuracy); add one to evaluate" in err
    assert (tmp_path / "run" / "metrics.jsonl").read_text().count('"step": 1') == 1
    # A value the user chose does ask for eval rows.
    assert main(["check", str(cfg), "--set", "train.local_eval_every=5"]) == 2
    assert "train.local_eval_every: is 5 but there are no eval rows" in capsys.readouterr().err


def test_open_instructs_text_form_of_a_constant_denominator_is_a_number(capsys):
    assert main(["check", str(EXAMPLE), "--set", 'algorithm.loss_denominator="1024"']) == 0
    assert main(["check", str(EXAMPLE), "--set", 'algorithm.loss_denominator="many"']) == 2
    assert "algorithm.loss_denominator: expected 'token' or a number" in capsys.readouterr().err
