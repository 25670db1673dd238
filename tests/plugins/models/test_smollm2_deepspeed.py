"""SmolLM2-135M-Instruct on two DeepSpeed ZeRO-2 learners over gloo (heavy: the real model and the
deepspeed extra). One training step of the example at the smallest shape (2 prompts x 2 samples,
8 new tokens), scored by a length target in characters so that the four rewards differ and the
step has a gradient: the ZeRO-2 step, whose gradients and optimizer state are sharded over the two
ranks, has the one-process step's loss and gradient norm; its checkpoint, gathered from the shards,
holds every weight once with every tensor moved by one Adam step, and evaluates with ``grpo-run
eval``. Each rank holds the fp32 model with its Adam state (about 2.2 GB)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from safetensors.torch import load_file

from grpo_run import NoConfig
from grpo_run.cli.main import main
from grpo_run.plugins.models import smollm2
from support.paths import EXAMPLES

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(900)]
pytest.importorskip("deepspeed", reason="ZeRO learners need the deepspeed extra (pip install 'grpo-run[deepspeed]')")

EXAMPLE = str(EXAMPLES / "smollm2-arithmetic.toml")
TINY = ["task.size=8", "task.eval_size=2", "rollout.num_unique_prompts_rollout=2",
        "rollout.num_samples_per_prompt_rollout=2", "rollout.response_length=8",
        "algorithm.filter_zero_std_samples=false", "train.total_steps=1", "train.local_eval_every=0",
        "optim.warmup_steps=1", "logging.progress=false", "logging.log_rollouts_every=0",
        # A reward that varies within a group at 8 tokens (math answers rarely fit): a length target.
        "verifiers.length.unit=chars", "verifiers.length.target=24", "verifiers.length.decay=gaussian"]
ZERO2 = ["learner.num_learners=2", "learner.strategy=deepspeed", "learner.zero_stage=2", "checkpoint.save_freq=1"]


def run(out: Path, *extra: str) -> dict:
    assert main([EXAMPLE, "--output-dir", str(out), *(a for kv in [*TINY, *extra] for a in ("--set", kv))]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1]
    return rows[0]


def test_a_zero2_step_on_two_learners_equals_one_process_and_its_checkpoint_evaluates(tmp_path, capsys):
    one = run(tmp_path / "one")
    two = run(tmp_path / "two", *ZERO2)
    started = [json.loads(line) for line in (tmp_path / "two" / "log.jsonl").read_text().splitlines()
               if '"learners_started"' in line]
    assert len(started[0]["ranks"]) == 2
    assert one["reward/std"] > 0 and one["optim/grad_norm"] > 0  # the step had something to learn
    assert {k: two[k] for k in ("reward/mean", "reward/std")} == {k: one[k] for k in ("reward/mean", "reward/std")}
    for key in ("loss/policy", "optim/grad_norm"):
        assert math.isfinite(two[key]) and two[key] == pytest.approx(one[key], rel=1e-4, abs=1e-7), key

    # The checkpoint holds both ranks' shards after one Adam step (no weight decay): every tensor
    # moved, and no element by more than the learning rate (Adam's first step is lr x sign(g)).
    checkpoint = tmp_path / "two" / "checkpoints" / "step_1"
    saved = load_file(checkpoint / "model.safetensors")
    base = load_file(Path(smollm2.SmolLM2Model(NoConfig()).resolve()) / "model.safetensors")
    assert saved.keys() == base.keys()
    moved = {k: (saved[k] - base[k]).abs().max().item() for k in base}
    assert all(0 < m <= 1.01 * two["optim/lr"] for m in moved.values()), moved
    capsys.readouterr()
    assert main(["eval", EXAMPLE, "--checkpoint", str(checkpoint), "--json",
                 "--set", "task.eval_size=2", "--set", "rollout.response_length=8"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["step"] == 1 and metrics["eval/num_prompts"] == 2
