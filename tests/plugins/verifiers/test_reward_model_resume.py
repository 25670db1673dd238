"""The ``reward_model`` verifier's running standardisation across a checkpoint: the moments are in
every checkpoint, count training completions only (evaluations use them without moving them), a
run resumed from step 2 scores steps 3 and 4 exactly as the uninterrupted run did, and
``grpo-run eval`` of a checkpoint uses the moments it holds."""

from __future__ import annotations

import json
from pathlib import Path

from support.reward_models import random_reward_model
from support.runs import write_run

from grpo_run.cli.main import main
from grpo_run.core.loop.checkpoint import load_trainer_state

PROMPTS, SAMPLES = 3, 4


def metrics_by_step(run: Path) -> dict[int, dict[str, float]]:
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    timing = ("perf/", "latency_")  # wall-clock numbers differ between any two runs
    return {line["step"]: {k: v for k, v in line.items() if not any(t in k for t in timing)} for line in lines}


def test_the_running_standardisation_is_checkpointed_and_continues_exactly(tmp_path, tiny_model_dir) -> None:
    model = random_reward_model(tmp_path / "rm", tiny_model_dir)
    cfg = write_run(tmp_path, verifier="reward_model", eval_rows=4,
                    verifier_config={"model": str(model), "transform": "standardize", "clip": [-3.0, 3.0],
                                     "max_length": 9},
                    model={"name_or_path": str(tiny_model_dir)},
                    rollout={"num_unique_prompts_rollout": PROMPTS, "num_samples_per_prompt_rollout": SAMPLES},
                    optim={"lr": 1e-3}, train={"total_steps": 4, "local_eval_every": 1},
                    checkpoint={"save_freq": 2})
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    assert main([str(cfg), "--output-dir", str(full)]) == 0
    assert main([str(cfg), "--output-dir", str(resumed), "--resume", str(full / "checkpoints" / "step_2")]) == 0

    at_2 = load_trainer_state(full / "checkpoints" / "step_2")["scorer"]["reward_model"]
    # Training completions only: the evaluations after steps 0, 1 and 2 used the moments, left them alone.
    assert at_2["count"] == 2 * PROMPTS * SAMPLES
    ends = [load_trainer_state(run / "checkpoints" / "step_4")["scorer"]["reward_model"] for run in (full, resumed)]
    assert ends[0] == ends[1] and ends[0]["count"] == 4 * PROMPTS * SAMPLES
    full_metrics, resumed_metrics = metrics_by_step(full), metrics_by_step(resumed)
    assert all("eval/accuracy" in full_metrics[step] for step in (0, 1, 2))
    assert all(resumed_metrics[step] == full_metrics[step] for step in (3, 4))
    third = full_metrics[3]
    assert third["verifier/reward_model/errors"] == 0 and third["reward/std"] > 0
    assert -3.0 <= third["verifier/reward_model/mean_score"] <= 3.0
    # grpo-run eval of a checkpoint standardises with the moments the checkpoint holds, as the run did.
    out = tmp_path / "eval"
    assert main(["eval", str(cfg), "--checkpoint", str(full / "checkpoints" / "step_4"), "--output-dir", str(out)]) == 0
    evaluated = json.loads((out / "eval_metrics.json").read_text())
    assert evaluated["eval/reward_mean"] == full_metrics[4]["eval/reward_mean"]
    # Texts longer than max_length lost their start, and the metrics count them.
    assert 0 < third["verifier/reward_model/truncated"] <= 1 and third["verifier/reward_model/truncated_tokens"] > 0
