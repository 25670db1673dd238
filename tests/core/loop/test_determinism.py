"""What "bit-identical" needs (docs/reliability.md, "What is exact on resume"): two runs of one
config, in two processes, with one intra-op thread (``train.num_threads = 1``), end with the
same weights bit for bit and write the same metrics. With more threads torch's CPU kernels may
split a reduction differently from one run to the next (a drift of ~2e-7 from step 1 was seen on
a loaded 2-core machine), so the docs promise bit-identity for one thread only. The same holds for
a shipped multi-turn environment example, whose episodes run environment code on threads and batch
their turns across episodes (issue 31)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from support.paths import EXAMPLES
from support.processes import run_grpo
from support.runs import write_run
from support.verifiers import LENGTH_REWARD

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _metrics(run: Path) -> list[dict[str, float]]:
    """Every logged metric but the wall-clock ones (``perf/*``, latencies, seconds spent)."""
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in line.items() if not _wall_clock(k)} for line in lines]


def _wall_clock(key: str) -> bool:
    return key.startswith("perf/") or "latency_" in key or key.endswith(("/env_s", "/generation_s"))


def test_two_runs_with_one_thread_are_bit_identical(tmp_path, tiny_model_dir) -> None:
    cfg = write_run(
        tmp_path, verifier=LENGTH_REWARD, train_rows=10, eval_rows=3,
        prompt=lambda i: f"{i}*3", gold=lambda i: str(3 * i),
        model={"name_or_path": str(tiny_model_dir)},
        rollout={"num_samples_per_prompt_rollout": 3, "response_length": 5},
        optim={"lr": 1e-3}, kl={"beta": 0.1},
        train={"total_steps": 3, "local_eval_every": 1, "num_threads": 1},
        eval={"num_samples": 2},
    )
    runs = [tmp_path / "first", tmp_path / "second"]
    for run in runs:
        done = run_grpo([str(cfg), "--output-dir", str(run)], limit_s=500)
        assert done.returncode == 0, done.output[-3000:]
    a, b = (load_file(run / "checkpoints" / "step_3" / "model.safetensors") for run in runs)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert _metrics(runs[0]) == _metrics(runs[1])


def test_two_runs_of_the_guess_a_digit_example_with_one_thread_are_identical(tmp_path) -> None:
    # Issue 31: at the default thread count, seven runs of this example with seed 1 drifted apart
    # (grad_norm differs in the 7th digit from step 2 or 3 on). With one intra-op thread the
    # environment's threads and the lockstep turn batches leave nothing to chance.
    runs = [tmp_path / "first", tmp_path / "second"]
    for run in runs:
        done = run_grpo([str(EXAMPLES / "guess-a-digit.toml"), "--output-dir", str(run), "--set", "train.num_threads=1",
                         "--set", "train.total_steps=15", "--set", "logging.progress=false"], limit_s=280)
        assert done.returncode == 0, done.output[-3000:]
    first, second = (_metrics(run) for run in runs)
    assert [line["step"] for line in first] == list(range(16))
    assert {"eval/env/turns_mean", "env/turns_mean", "optim/grad_norm", "reward/mean"} <= set().union(*first)
    assert len({line.get("reward/mean") for line in first[1:]}) > 10  # the runs learn: the values move
    assert first == second
    a, b = (load_file(run / "checkpoints" / "step_15" / "model.safetensors") for run in runs)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
