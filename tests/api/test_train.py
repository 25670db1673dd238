"""``grpo_run.train`` / ``load_config`` from Python: configs as paths, dicts or RunConfig, overrides,
and a notebook-style script (``python -``, no main file) training with two plain reward functions."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import grpo_run
from support.paths import EXAMPLES


def test_load_config_merges_overrides_section_by_section():
    cfg = grpo_run.load_config(EXAMPLES / "arithmetic.toml", train={"total_steps": 70}, rollout={"temperature": 0.5})
    assert isinstance(cfg, grpo_run.RunConfig)
    assert (cfg.train.total_steps, cfg.train.local_eval_every, cfg.rollout.temperature) == (70, 5, 0.5)
    again = grpo_run.load_config(cfg, checkpoint={"save_freq": 0})  # a RunConfig goes back in
    assert again.train.total_steps == 70 and again.checkpoint.save_freq == 0
    with pytest.raises(grpo_run.UserError) as e:
        grpo_run.load_config(EXAMPLES / "arithmetic.toml", train={"total_stpes": 3})
    assert "train.total_stpes: unknown key (did you mean 'total_steps'?)" in str(e.value)


def test_a_reward_function_named_like_a_configured_verifier_is_refused():
    def math(completion, ground_truth, row):
        return 0.0

    with pytest.raises(grpo_run.UserError) as e:
        grpo_run.load_config(EXAMPLES / "arithmetic.toml", reward_funcs=[math])
    assert str(e.value) == ("reward function 'math' has the name of the 'math' verifier of 'grpo-run'; "
                            "name it apart: grpo_run.RewardFunction(fn, name=...)")

    def mine(completion, ground_truth, row):
        return 0.0

    with pytest.raises(grpo_run.UserError, match=r"\[verifiers.mine\] is also the name of a reward function"):
        grpo_run.load_config(EXAMPLES / "arithmetic.toml", reward_funcs=[mine], verifiers={"mine": {}})


SCRIPT = """
import json, sys
import grpo_run

def exact(completion, ground_truth, row):
    return 1.0 if completion.strip() == str(ground_truth) else 0.0

def brevity(completions, answer, **kwargs):   # TRL's signature; `answer` is a column of the rows
    return [1.0 if len(c) <= 3 else 0.0 for c in completions]

rows = [{"prompt": f"{a}+{b}", "answer": str(a + b)} for a in range(4) for b in range(3)]
with open("sums.jsonl", "w") as fh:
    fh.writelines(json.dumps(r) + "\\n" for r in rows)
config = {
    "model": {"name_or_path": "tiny-arithmetic"},
    "data": {"max_prompt_token_length": 16, "train": [{"path": "sums.jsonl", "ground_truth_key": "answer"}],
             "eval": [{"path": "sums.jsonl", "ground_truth_key": "answer", "rows": 4}]},
    "rollout": {"num_unique_prompts_rollout": 3, "num_samples_per_prompt_rollout": 4, "response_length": 6},
    "algorithm": {"pack_length": 32, "filter_zero_std_samples": False},
    "train": {"total_steps": 2, "local_eval_every": 2},
    "logging": {"progress": False},
}
result = grpo_run.train(config, reward_funcs=[exact, brevity], reward_weights=[1.0, 0.5], output_dir="run")
print("RESULT", json.dumps({"run_dir": str(result.run_dir), "checkpoint": str(result.checkpoint),
                            "metrics": result.metrics}))
"""


def test_a_notebook_style_script_trains_with_two_plain_reward_functions(tmp_path):
    # `python -`: __main__ has no file, the functions exist only in this process; the scoring
    # workers (scoring.num_workers = 1, the default) get them by value.
    proc = subprocess.run([sys.executable, "-"], input=SCRIPT, capture_output=True, text=True, cwd=tmp_path,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    result = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT"))[7:])
    assert result["run_dir"] == "run" and result["checkpoint"] == "run/checkpoints/step_2"
    metrics = result["metrics"]
    for name in ("exact", "brevity"):
        assert metrics[f"verifier/{name}/calls"] == 12.0 and metrics[f"verifier/{name}/errors"] == 0.0
    assert metrics["eval/num_prompts"] == 4.0
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    for m in (m for m in lines if m["step"] >= 1):
        # reward = 1 x exact + 0.5 x brevity, per completion; the step mean follows the verifiers' means
        expected = m["verifier/exact/mean_score"] + 0.5 * m["verifier/brevity/mean_score"]
        assert m["reward/mean"] == pytest.approx(expected, abs=1e-12)


def test_train_inside_a_running_event_loop(tmp_path):
    # A Jupyter cell runs inside an event loop: the run goes to a helper thread.
    rows = [{"prompt": f"{a}+{b}", "ground_truth": str(a + b)} for a in range(4) for b in range(3)]
    (tmp_path / "sums.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    def shortest(completion, ground_truth, row):
        return 1.0 / (1 + len(completion))

    config = {
        "model": {"name_or_path": "tiny-arithmetic"},
        "data": {"max_prompt_token_length": 16, "train": [{"path": str(tmp_path / "sums.jsonl")}]},
        "rollout": {"num_unique_prompts_rollout": 2, "num_samples_per_prompt_rollout": 4, "response_length": 4},
        "algorithm": {"pack_length": 32},
        "train": {"total_steps": 1, "local_eval_every": 0},
        "scoring": {"num_workers": 0},
        "logging": {"progress": False},
    }

    async def cell() -> grpo_run.TrainResult:
        return grpo_run.train(config, reward_funcs=[shortest], output_dir=tmp_path / "run")

    result = asyncio.run(cell())
    assert result.run_dir == Path(tmp_path / "run") and result.checkpoint == tmp_path / "run/checkpoints/step_1"
    assert result.metrics["verifier/shortest/calls"] == 8.0
    assert result.config.data.train[0].path == str(tmp_path / "sums.jsonl")


def test_a_failed_start_leaves_nothing_in_the_way_and_overwrite_starts_again(tmp_path):
    rows = [{"prompt": f"{a}+{b}", "ground_truth": str(a + b)} for a in range(4) for b in range(3)]
    good = "".join(json.dumps(r) + "\n" for r in rows)
    (tmp_path / "sums.jsonl").write_text(good + json.dumps({"prompt": ["not", "text"]}) + "\n")

    def shortest(completion, ground_truth, row):
        return 1.0 / (1 + len(completion))

    config = {
        "model": {"name_or_path": "tiny-arithmetic"},
        "data": {"max_prompt_token_length": 16, "train": [{"path": str(tmp_path / "sums.jsonl")}]},
        "rollout": {"num_unique_prompts_rollout": 2, "num_samples_per_prompt_rollout": 2, "response_length": 2},
        "algorithm": {"pack_length": 32, "filter_zero_std_samples": False},
        "train": {"total_steps": 1, "local_eval_every": 0},
        "checkpoint": {"save_final": False},
        "scoring": {"num_workers": 0},
        "logging": {"progress": False},
    }
    run = tmp_path / "run"
    with pytest.raises(grpo_run.UserError, match="sums.jsonl:13: 'prompt' must be a non-empty string"):
        grpo_run.train(config, reward_funcs=[shortest], output_dir=run)
    (tmp_path / "sums.jsonl").write_text(good)
    assert grpo_run.train(config, reward_funcs=[shortest], output_dir=run).metrics["verifier/shortest/calls"] == 4.0
    with pytest.raises(grpo_run.UserError, match="already holds a run"):
        grpo_run.train(config, reward_funcs=[shortest], output_dir=run)
    result = grpo_run.train(config, reward_funcs=[shortest], output_dir=run, overwrite=True)
    assert result.metrics["verifier/shortest/calls"] == 4.0
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [1]


def test_reward_funcs_alone_are_enough_for_rows_that_name_a_verifier(tmp_path):
    from grpo_run.core.data.sources import load_rows
    from grpo_run.core.plugins.host import build_plugin_host

    def exact(completion, ground_truth):
        return float(completion.strip() == ground_truth)

    # The arithmetic task's rows name "math"; without the file's [verifiers.math] the function alone scores.
    cfg = grpo_run.load_config(EXAMPLES / "arithmetic.toml", reward_funcs=[exact], verifiers=None)
    assert list(cfg.verifiers) == ["exact"] and cfg.scoring.row_verifiers is False
    rows = load_rows(cfg, build_plugin_host().registry).train
    assert rows[0]["verifier"] == "math" and rows[0]["ground_truth"]  # kept as data for the functions
    # A data source that names a verifier for its rows, likewise.
    (tmp_path / "a.jsonl").write_text(json.dumps({"prompt": "1+1", "answer": "2"}) + "\n")
    source = {"path": str(tmp_path / "a.jsonl"), "verifier": "math", "ground_truth_key": "answer"}
    cfg = grpo_run.load_config({"data": {"train": [source]}, "train": {"local_eval_every": 0}}, reward_funcs=[exact])
    assert load_rows(cfg, build_plugin_host().registry).train[0]["ground_truth"] == "2"
    # With verifiers of the config's own, both count, and the rows must name enabled ones.
    both = grpo_run.load_config(EXAMPLES / "arithmetic.toml", reward_funcs=[exact])
    assert sorted(both.verifiers) == ["exact", "math"] and both.scoring.row_verifiers is True
