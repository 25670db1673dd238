"""The example on SmolLM2-135M-Instruct through LoRA, a checkpoint, an exact resume and
``grpo-run eval`` with pass@k, each as short as it can be (heavy: the real model).

One LoRA run of 2 steps saves after each; a second run resumed from its step 1 trains step 2 again
and must end with the same adapter bit for bit (one intra-op thread: docs/reliability.md). The
step-2 adapter is then evaluated by ``grpo-run eval`` with sampled completions for pass@k.
Full fine-tuning's two steps and its checkpoint are test_smollm2_real.py's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from grpo_run.cli.main import main
from support.paths import EXAMPLES

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(1800)]
pytest.importorskip("peft", reason="LoRA needs the peft extra (pip install 'grpo-run[peft]')")

EXAMPLE = str(EXAMPLES / "smollm2-arithmetic.toml")
SHORT = ["task.size=16", "task.eval_size=2", "rollout.num_unique_prompts_rollout=2",
         "rollout.num_samples_per_prompt_rollout=4", "rollout.response_length=12",
         "algorithm.filter_zero_std_samples=false", "train.total_steps=2", "train.local_eval_every=0",
         "train.num_threads=1", "checkpoint.save_freq=1", "logging.progress=false",
         "model.lora.r=8", "model.lora.alpha=16", "optim.lr=1e-3"]


def sets(pairs: list[str]) -> list[str]:
    return [arg for kv in pairs for arg in ("--set", kv)]


def adapter(checkpoint: Path) -> dict[str, torch.Tensor]:
    return load_file(checkpoint / "adapter_model.safetensors")


def test_a_lora_run_resumes_exactly_and_its_adapter_evaluates_with_pass_at_k(tmp_path, capsys):
    run = tmp_path / "run"
    # A seed whose second step has a reward to learn from (2 prompts x 4 samples often have none).
    short = [*SHORT, "run.seed=2"]
    assert main([EXAMPLE, "--output-dir", str(run), *sets(short)]) == 0
    step1, step2 = run / "checkpoints" / "step_1", run / "checkpoints" / "step_2"
    assert (step2 / "adapter_config.json").is_file() and not (step2 / "model.safetensors").exists()
    first, second = adapter(step1), adapter(step2)
    assert any(not torch.equal(first[k], second[k]) for k in first)  # step 2 moved the adapter

    resumed = tmp_path / "resumed"
    assert main([EXAMPLE, "--output-dir", str(resumed), "--resume", str(step1), *sets(short)]) == 0
    again = adapter(resumed / "checkpoints" / "step_2")
    assert again.keys() == second.keys() and all(torch.equal(again[k], second[k]) for k in second)

    capsys.readouterr()
    assert main(["eval", EXAMPLE, "--checkpoint", str(step2), "--json",
                 *sets(["task.eval_size=4", "rollout.response_length=16", "eval.num_samples=4"])]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["step"] == 2 and metrics["eval/num_prompts"] == 4
    pass_at = [metrics[f"eval/pass@{k}"] for k in range(1, 5)]
    assert all(0.0 <= a <= b <= 1.0 for a, b in zip(pass_at, pass_at[1:])), pass_at
    assert 0.0 <= metrics["eval/accuracy"] <= 1.0
