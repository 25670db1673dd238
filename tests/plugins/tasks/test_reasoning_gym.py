"""The reasoning_gym task: rows from two reasoning-gym generators by weight, and a short offline run."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("reasoning_gym")

from grpo_run.cli.main import main  # noqa: E402
from grpo_run.plugins.tasks.reasoning_gym import ReasoningGymConfig, ReasoningGymTask, split_counts  # noqa: E402


def test_split_counts_follow_the_weights():
    assert split_counts(30, {"a": 2.0, "b": 1.0}) == {"a": 20, "b": 10}
    assert split_counts(10, {"a": 1.0, "b": 1.0, "c": 1.0}) == {"a": 4, "b": 3, "c": 3}  # largest remainder first
    assert split_counts(2, {"a": 100.0, "b": 1.0}) == {"a": 1, "b": 1}  # every task gets a row


def test_rows_carry_the_entry_for_the_tasks_own_scorer():
    task = ReasoningGymTask(ReasoningGymConfig(tasks={"chain_sum": 1.0, "basic_arithmetic": 3.0}, size=8,
                                               eval_size=4, system_prompt=""))
    train, evals = task.train_rows(), task.eval_rows()
    assert [r["dataset"] for r in train] == ["chain_sum"] * 2 + ["basic_arithmetic"] * 6
    assert [r["id"] for r in evals] == ["chain_sum-eval-0", "basic_arithmetic-eval-0", "basic_arithmetic-eval-1",
                                        "basic_arithmetic-eval-2"]
    first = train[0]
    assert first["verifier"] == "reasoning_gym" and first["ground_truth"]["task"] == "chain_sum"
    assert first["messages"] == [{"role": "user", "content": first["ground_truth"]["entry"]["question"]}]
    assert task.train_rows() == train  # seeded: the same rows every time
    assert {r["messages"][0]["content"] for r in evals}.isdisjoint({r["messages"][0]["content"] for r in train[:1]})


def test_the_default_system_prompt_asks_for_answer_tags():
    row = ReasoningGymTask(ReasoningGymConfig(tasks={"gcd": 1.0}, size=1, eval_size=0)).train_rows()[0]
    assert row["messages"][0]["role"] == "system" and "<answer>" in row["messages"][0]["content"]


@pytest.mark.parametrize(
    ("tasks", "message"),
    [
        ({}, "name at least one reasoning-gym task"),
        ({"chain_sum": 0.0}, "weights must be positive finite numbers; got chain_sum = 0.0"),
        ({"chain_sums": 1.0}, "unknown reasoning-gym tasks 'chain_sums' (did you mean 'chain_sum'?)"),
    ],
)
def test_bad_task_options(tasks, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("?", r"\?")):
        ReasoningGymConfig(tasks=tasks)


def test_two_tasks_train_offline(tmp_path):
    config = tmp_path / "rg.toml"
    config.write_text("""
[model]
name_or_path = "tiny-arithmetic"
[task]
name = "reasoning_gym"
tasks = {basic_arithmetic = 2.0, chain_sum = 1.0}
size = 30
eval_size = 6
system_prompt = ""
[verifiers.reasoning_gym]
answer_format = "raw"
[data]
max_prompt_token_length = 96
[rollout]
num_unique_prompts_rollout = 3
num_samples_per_prompt_rollout = 4
response_length = 6
[algorithm]
pack_length = 128
[train]
total_steps = 3
local_eval_every = 3
[logging]
progress = false
""")
    assert main([str(config), "--output-dir", str(tmp_path / "run")]) == 0
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in metrics if m["step"] >= 1]
    assert [m["step"] for m in steps] == [1, 2, 3]
    for m in steps:
        assert m["verifier/reasoning_gym/calls"] == 12.0 and m["verifier/reasoning_gym/errors"] == 0.0
    assert [m["eval/num_prompts"] for m in metrics if "eval/num_prompts" in m] == [6.0, 6.0]


def test_the_example_config_checks(capsys):
    from support.paths import EXAMPLES

    example = EXAMPLES / "reasoning_gym.toml"
    assert main(["check", str(example), "--set", "model.name_or_path=tiny-arithmetic"]) == 0
    assert capsys.readouterr().out == f"{example}: ok\n  task reasoning_gym: 2000 rows read, 2000 used\n"


def test_options_set_the_difficulty_and_math_rows_carry_the_answer():
    config = ReasoningGymConfig(tasks={"chain_sum": 1.0}, size=20, eval_size=0, system_prompt="", verifier="math",
                                options={"chain_sum": {"min_terms": 2, "max_terms": 2, "max_digits": 2}})
    rows = ReasoningGymTask(config).train_rows()
    for row in rows:
        expression = row["messages"][0]["content"].split(":")[-1].rstrip("= ")
        terms = expression.replace("-", "+").split("+")
        assert len(terms) == 2 and all(0 <= int(t) <= 99 for t in terms), expression
        assert row["verifier"] == "math" and row["ground_truth"] == str(eval(expression))  # noqa: S307 - digits and +/-
    assert any(max(int(t) for t in r["messages"][0]["content"].split(":")[-1].rstrip("= ").replace("-", "+").split("+")) > 9
               for r in rows)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"gcd": {}}, "options for 'gcd', which 'tasks' does not name"),
        ({"chain_sum": {"max_term": 2}}, "chain_sum: unknown settings 'max_term'; ChainSumConfig has allow_negation, "
                                         "max_digits, max_terms, min_digits, min_terms"),
        ({"chain_sum": {"min_terms": 3, "max_terms": 2}}, "chain_sum: max_terms must be >= min_terms"),
        ({"chain_sum": 2}, "options of 'chain_sum' must be a table"),
    ],
)
def test_bad_generator_options(options, message):
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        ReasoningGymConfig(tasks={"chain_sum": 1.0}, options=options)
