"""What a run says on its console besides progress: warnings at start (a warm-up longer than a
short smoke run, bf16 autocast on a CPU without bf16 instructions) and a time limit that ended it."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.processes import metrics_steps
from support.runs import write_run
from support.verifiers import LENGTH_REWARD

import grpo_run.core.loop.opening as opening_module
from grpo_run.cli.main import main
from grpo_run.core.learner.cpu_bf16 import cpu_flags, slow_bf16_warning


def _config(tmp_path: Path, model_dir: Path, model: dict | None = None, **sections) -> Path:
    return write_run(tmp_path, verifier=LENGTH_REWARD, train_rows=10, model={"name_or_path": str(model_dir), **(model or {})},
                     rollout={"num_unique_prompts_rollout": 2, "num_samples_per_prompt_rollout": 2,
                              "response_length": 3}, **sections)


def test_a_time_limit_that_ends_a_run_says_so_with_steps_and_checkpoint(tmp_path, tiny_model_dir, capsys) -> None:
    cfg = _config(tmp_path, tiny_model_dir, train={"total_steps": 5, "max_runtime_s": 1e-6})
    out = tmp_path / "out"
    assert main([str(cfg), "--output-dir", str(out)]) == 0
    assert metrics_steps(out) == []  # the limit covers generation too: the first batch was abandoned
    err = capsys.readouterr().err
    line = (f"warning: time limit reached (train.max_runtime_s = 1e-06) after 0 of 5 steps (generation in "
            f"progress abandoned); checkpoint {out / 'checkpoints' / 'step_0'}")
    assert line in err.splitlines()
    # A run that reaches train.total_steps says nothing of the kind.
    assert main([str(cfg), "--output-dir", str(tmp_path / "full"), "--set", "train.total_steps=1",
                 "--set", "train.max_runtime_s=600"]) == 0
    assert "time limit" not in capsys.readouterr().err


def test_a_warmup_longer_than_a_smoke_run_is_a_warning(tmp_path, tiny_model_dir, capsys) -> None:
    cfg = _config(tmp_path, tiny_model_dir, optim={"warmup_steps": 10})
    warning = ("warning: optim.warmup_steps = 10 is more than train.total_steps = 1: the run ends during warm-up, "
               "with the learning rate at 10% of optim.lr")
    assert main(["check", str(cfg), "--set", "train.total_steps=1"]) == 0
    assert warning in capsys.readouterr().err.splitlines()
    assert main([str(cfg), "--output-dir", str(tmp_path / "out"), "--set", "train.total_steps=1"]) == 0
    assert warning in capsys.readouterr().err.splitlines()
    assert metrics_steps(tmp_path / "out") == [1]


def test_bf16_autocast_on_a_cpu_without_bf16_instructions_warns_at_start(tmp_path, tiny_model_dir, capsys,
                                                                         monkeypatch) -> None:
    monkeypatch.setattr(opening_module, "cpu_flags", lambda: {"fpu", "avx2"})
    cfg = _config(tmp_path, tiny_model_dir, model={"autocast": "bfloat16", "device": "cpu"},
                  train={"total_steps": 1})
    assert main([str(cfg), "--output-dir", str(tmp_path / "out")]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:") and "bf16" in line]
    assert lines == ['warning: model.autocast = "bfloat16" on a CPU without bf16 instructions (no amx_bf16 or '
                     'avx512_bf16 in /proc/cpuinfo): learner steps are usually several times slower than in '
                     'float32 here; set model.autocast = "none" (bench/bench_precision.py measures both)']


@pytest.mark.parametrize(("flags", "autocast", "device", "warns"), [
    ({"avx2"}, "bfloat16", "cpu", True),
    ({"avx2", "avx512_bf16"}, "bfloat16", "cpu", False),
    ({"avx2", "amx_bf16"}, "bfloat16", "cpu", False),
    ({"avx2"}, "none", "cpu", False),
    ({"avx2"}, "bfloat16", "cuda", False),
    (None, "bfloat16", "cpu", False),  # no /proc/cpuinfo: no rule to go by
])
def test_the_slow_bf16_rule(flags, autocast, device, warns) -> None:
    assert (slow_bf16_warning(autocast, device, flags) is not None) is warns


def test_cpu_flags_come_from_the_first_flags_line(tmp_path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 amx_bf16\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    assert cpu_flags(info) == {"fpu", "avx2", "amx_bf16"}
    assert cpu_flags(tmp_path / "missing") is None
