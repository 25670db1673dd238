"""The ``arithmetic`` task: held-out eval set, determinism, correct ground truths."""

from __future__ import annotations

import operator
import re

import pytest

from grpo_run.plugins.tasks.arithmetic import ArithmeticConfig, ArithmeticTask

PYTHON_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul}
PROBLEM = re.compile(r"^(\d+)([+\-*])(\d+)$")


def _problem(row):
    return row["messages"][0]["content"]


def test_defaults_are_two_digit_addition():
    config = ArithmeticConfig()
    assert config.operations == ("+",)
    assert config.max_operand == 49
    task = ArithmeticTask(config)
    assert len(task.eval_rows()) == config.num_eval
    assert len(task.train_rows()) + len(task.eval_rows()) == 50 * 50


@pytest.mark.parametrize("config", [ArithmeticConfig(), ArithmeticConfig(operations=("+", "-", "*"), max_operand=30)])
def test_train_and_eval_are_disjoint(config):
    task = ArithmeticTask(config)
    train = {_problem(r) for r in task.train_rows()}
    evaluation = {_problem(r) for r in task.eval_rows()}
    assert len(evaluation) == config.num_eval
    assert not train & evaluation


def test_rows_are_deterministic_and_seed_dependent():
    first = ArithmeticTask(ArithmeticConfig(seed=3))
    again = ArithmeticTask(ArithmeticConfig(seed=3))
    other = ArithmeticTask(ArithmeticConfig(seed=4))
    assert first.train_rows() == again.train_rows()
    assert first.eval_rows() == again.eval_rows()
    assert first.eval_rows() != other.eval_rows()


def test_ground_truths_match_python():
    task = ArithmeticTask(ArithmeticConfig(operations=("+", "-", "*"), max_operand=25, num_eval=50))
    rows = task.train_rows() + task.eval_rows()
    seen_ops = set()
    for row in rows:
        match = PROBLEM.match(_problem(row))
        assert match, row
        a, op, b = int(match[1]), match[2], int(match[3])
        assert 0 <= a <= 25 and 0 <= b <= 25
        assert row["ground_truth"] == str(PYTHON_OPS[op](a, b))
        assert int(row["ground_truth"]) >= 0  # subtraction keeps a >= b
        seen_ops.add(op)
    assert seen_ops == {"+", "-", "*"}


def test_row_format_and_unique_ids():
    task = ArithmeticTask(ArithmeticConfig(max_operand=20, num_eval=30))
    rows = task.train_rows() + task.eval_rows()
    assert rows[0].keys() == {"id", "messages", "ground_truth", "verifier"}
    assert all(r["verifier"] == "math" for r in rows)
    assert all(r["messages"][0]["role"] == "user" and len(r["messages"]) == 1 for r in rows)
    ids = [r["id"] for r in rows]
    assert len(set(ids)) == len(ids)
    assert task.eval_rows()[0]["id"] == "arith-eval-0"
    assert task.train_rows()[5]["id"] == "arith-train-5"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"operations": ()}, "at least one"),
        ({"operations": ("/",)}, "unknown operations"),
        ({"operations": ("+", "+")}, "duplicates"),
        ({"max_operand": 0}, "max_operand"),
        ({"num_eval": -1}, "num_eval"),
        ({"max_operand": 5, "num_eval": 36}, "below the number of problems"),
        ({"max_operand": 2000}, "exceed the limit"),
    ],
)
def test_config_rejects_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ArithmeticConfig(**kwargs)
