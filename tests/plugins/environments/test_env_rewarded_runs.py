"""Runs rewarded by their environment alone (``scoring.row_verifiers = false``): the headline
"solved" means the episode's reward reached ``environment.success_threshold`` (1.0 unset), in
the progress bar, ``stop_at_eval_accuracy``, the eval traces, the report and ``grpo-run eval``."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("openai")
pytest.importorskip("uvicorn")

from support.paths import EXAMPLES  # noqa: E402

from grpo_run.cli.main import main  # noqa: E402
from grpo_run.core.rollout.episodes import episode_solved, success_bar  # noqa: E402

CONFIG = """
[task]
name = "arithmetic"
max_operand = 49
num_eval = 16

[data]
max_prompt_token_length = 16

[rollout]
num_unique_prompts_rollout = 4
num_samples_per_prompt_rollout = 4
response_length = 32

[environment]
name = "agent"
function = "agent_calculator:solve"   # reward 1.0 when the agent's answer is the sum
max_turns = 3
max_tokens_per_turn = 18

[scoring]
row_verifiers = false                 # the agent's reward alone (the penalty below is 0 unless cut)

[verifiers.non_stop_penalty]
all_rows = true

[train]
total_steps = 6
local_eval_every = 2
stop_at_eval_accuracy = 0.01

[logging]
log_rollouts_every = 1
progress = false
"""


def test_solved_follows_the_threshold_or_the_verifiers():
    # No threshold and verifiers that can reward the row: their verdict alone (env reward ignored).
    assert success_bar(1.0, None) is None
    assert episode_solved(True, 1.0, 1.0, 0.0, None) and not episode_solved(False, 0.0, 1.0, 5.0, None)
    # (the verdict is the correctness verifiers', even where a format reward kept the reward below its maximum)
    assert episode_solved(True, 1.0, 2.0, 0.0, None)
    # Only the environment rewards the row: its reward must reach 1.0 ...
    assert success_bar(0.0, None) == 1.0
    assert episode_solved(False, 0.0, 0.0, 1.0, None) and not episode_solved(False, 0.0, 0.0, 0.99, None)
    # ... or the configured threshold, on the whole reward (verifiers' + environment's).
    assert episode_solved(False, 0.25, 1.0, 0.5, 0.75) and not episode_solved(True, 0.25, 1.0, 0.25, 0.75)


def test_an_environment_rewarded_run_reports_its_successes(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))  # agent_calculator.py, as PYTHONPATH=examples does
    config = tmp_path / "agent.toml"
    config.write_text(CONFIG)
    out = tmp_path / "run"
    assert main([str(config), "--output-dir", str(out)]) == 0
    err = capsys.readouterr().err
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [m for m in metrics if "eval/accuracy" in m]
    # The accuracy is the agent's: an episode is solved when the agent's reward is 1.
    for m in evals:
        assert m["eval/accuracy"] == pytest.approx(m["eval/env_reward_mean"], abs=1e-12)
    assert evals[-1]["eval/accuracy"] > 0
    # so stop_at_eval_accuracy can stop the run, and the console says so
    assert metrics[-1]["step"] == 2 and f"eval/accuracy {evals[-1]['eval/accuracy']:.3f} >= 0.01" in err
    assert metrics[-1]["reward/solve_rate"] == pytest.approx(
        sum(r["solved"] for r in map(json.loads, (out / "rollouts/step_2.jsonl").read_text().splitlines())) / 16)
    # The eval traces carry the episode's reward (not 0.0) and the same verdicts as the metric.
    traces = [json.loads(line) for line in (out / "rollouts/eval_2.jsonl").read_text().splitlines()]
    assert len(traces) == 16 and all(t["turns"] for t in traces)
    assert sum(t["reward"] for t in traces) / 16 == pytest.approx(evals[-1]["eval/env_reward_mean"])
    assert sum(t["solved"] for t in traces) / 16 == pytest.approx(evals[-1]["eval/accuracy"])
    assert all(t["solved"] == (t["reward"] >= 1.0) and t["max_reward"] == 1.0 for t in traces)
    # The report shows the episodes turn by turn, with roles and masks, and counts unsolved ones.
    assert main(["report", str(out), "--output-dir", str(tmp_path / "report")]) == 0
    page = (tmp_path / "report" / "report.html").read_text()
    unsolved = sum(not t["solved"] for t in traces)
    assert f"Evaluation after step 2: {unsolved} of 16 greedy episodes unsolved" in page
    assert "assistant · trained" in page
    # grpo-run eval judges a checkpoint the same way.
    capsys.readouterr()
    assert main(["eval", str(config), "--checkpoint", str(out / "checkpoints/step_2"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["eval/accuracy"] == pytest.approx(evals[-1]["eval/accuracy"])


def test_the_report_shows_every_turn_of_an_episode_with_its_role_and_mask(tmp_path):
    run = tmp_path / "run"
    (run / "rollouts").mkdir(parents=True)
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "eval/accuracy": 1.0}) + "\n")
    turns = [{"segment": 0, "role": "assistant", "trained": True, "text": "calculator(12+30)<|eos|>"},
             {"segment": 0, "role": "tool", "trained": False, "text": "<|user|>42<|assistant|>"},
             {"segment": 0, "role": "assistant", "trained": True, "text": "42<|eos|>"}]
    record = {"kind": "eval", "step": 1, "row_id": "r0", "group": 0, "sample": 0, "prompt": "12+30=",
              "completion": "42<|eos|>", "ground_truth": "42", "reward": 1.0, "max_reward": 1.0, "solved": True,
              "scores": {}, "finish_reason": "stop", "num_tokens": 9, "greedy": True, "turns": turns}
    (run / "rollouts" / "eval_1.jsonl").write_text(json.dumps(record) + "\n")
    assert main(["report", str(run), "--output-dir", str(tmp_path / "report")]) == 0
    page = (tmp_path / "report" / "report.html").read_text()
    first, tool, last = (page.index(text) for text in ("calculator(12+30)", "&lt;|user|&gt;42", "42&lt;|eos|&gt;"))
    assert first < tool < last  # all three turns, in order (not only the last one)
    assert page.count("assistant · trained") == 2 and page.count("tool · masked") == 1
    assert "0 of 1 greedy episodes unsolved" in page
