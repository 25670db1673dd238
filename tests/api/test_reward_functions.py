"""Plain reward functions become verifiers: signatures, names, weights, what they are called with."""

from __future__ import annotations

import json
import pickle

import pytest

import grpo_run
from grpo_run.api.reward_functions import (
    RewardFunctionConfig,
    as_reward_functions,
    call_style,
    function_verifier_classes,
)


def per_item(completion, ground_truth, row):
    return 1.0 if completion == ground_truth else None


def trl_style(completions, prompts, ground_truth, **kwargs):
    trl_style.seen = {"completions": completions, "prompts": prompts, "ground_truth": ground_truth, **kwargs}
    return [0.5] * len(completions)


def test_the_signature_decides_how_a_function_is_called():
    assert call_style(per_item) == "keyword" and call_style(trl_style) == "batch"
    assert call_style(lambda completions, **kw: []) == "batch"
    with pytest.raises(grpo_run.UserError) as e:
        call_style(lambda text: 1.0)
    assert str(e.value) == ("reward function '<lambda>' has parameters (text); use f(completions, **kwargs) -> "
                            "list[float] (TRL) or f(completion, ground_truth, **kwargs) -> float")
    assert call_style(lambda completion, **kw: 1.0) == "keyword" and call_style(lambda c, g, r: 1.0) == "item"


def test_names_and_weights():
    funcs = as_reward_functions([per_item, grpo_run.RewardFunction(trl_style, name="half", score_range=(0, 2))],
                                [2.0, 0.5])
    assert [(f.verifier_name, f.weight, f.score_range) for f in funcs] == [("per_item", 2.0, (0.0, 1.0)),
                                                                            ("half", 0.5, (0, 2))]
    assert [f.verifier_name for f in as_reward_functions({"a": per_item, "b": per_item}, None)] == ["a", "b"]
    with pytest.raises(grpo_run.UserError, match="2 reward functions but 1 reward_weights"):
        as_reward_functions([per_item, trl_style], [1.0])
    with pytest.raises(grpo_run.UserError, match="two reward functions are named 'per_item'"):
        as_reward_functions([per_item, per_item], None)
    with pytest.raises(grpo_run.UserError, match="has no usable name"):
        as_reward_functions([lambda completion, ground_truth, row: 1.0], None)


def test_the_verifier_classes_pickle_by_value_and_call_the_function():
    item_cls, batch_cls = function_verifier_classes(as_reward_functions([per_item, trl_style], None))
    item_cls, batch_cls = pickle.loads(pickle.dumps((item_cls, batch_cls)))  # what the workers receive
    assert item_cls.name == "per_item" and batch_cls.name == "trl_style"
    item = item_cls(RewardFunctionConfig())
    assert item.score("7", "7", {}) == 1.0
    assert item.score("8", "7", {}).applicable is False  # None: no opinion on this row
    batch = batch_cls(RewardFunctionConfig())
    chat_row = {"id": "c", "messages": [{"role": "user", "content": "hi"}], "dataset": "d"}
    text_row = {"id": "t", "prompt": "1+1", "dataset": "d", "level": 3}
    assert batch.score_batch([("hello", "g1", chat_row), ("2", "2", text_row)]) == [0.5, 0.5]


def test_trl_style_functions_get_trl_shaped_arguments():
    (cls,) = function_verifier_classes(as_reward_functions([trl_style], None))
    chat_row = {"id": "c", "messages": [{"role": "user", "content": "hi"}], "dataset": "d"}
    text_row = {"id": "t", "prompt": "1+1", "dataset": "d", "level": 3}
    verifier = cls(RewardFunctionConfig())
    verifier.score_batch([("hello", "g1", chat_row), ("2", "2", text_row)])
    assert verifier.fn.seen == {
        "completions": [[{"role": "assistant", "content": "hello"}], "2"],
        "prompts": [[{"role": "user", "content": "hi"}], "1+1"],
        "ground_truth": ["g1", "2"],
        "dataset": ["d", "d"],
        "id": ["c", "t"],
        "level": [None, 3],
    }


def test_score_with_plain_functions_and_built_in_verifiers():
    rows = [{"completion": "The answer is 4", "ground_truth": "4", "verifier": "math"},
            {"completion": "5", "ground_truth": "4", "verifier": "math"}]

    def short(completion, ground_truth, row):
        return 1.0 if len(completion) <= 3 else 0.0

    scored = grpo_run.score(rows, reward_funcs=[short], reward_weights=[0.5])
    assert [(s["reward"], s["scores"]) for s in scored] == [(1.0, {"math": 1.0, "short": 0.0}),
                                                           (0.5, {"math": 0.0, "short": 1.0})]
    only_math = grpo_run.score(rows[:1], verifiers={"math": {"weight": 2.0}})
    assert only_math[0]["reward"] == 2.0 and only_math[0]["completion"] == "The answer is 4"


def test_a_failing_function_is_an_error_on_its_row():
    def broken(completion, ground_truth, row):
        raise RuntimeError("boom")

    (scored,) = grpo_run.score([{"completion": "x"}], reward_funcs=[broken])
    assert scored["reward"] == 0.0 and scored["error"] == "broken: raised RuntimeError: boom"


ROWS = [{"completion": "4", "ground_truth": "4", "verifier": "math", "level": 1, "prompt": "2+2"},
        {"completion": "6", "ground_truth": "5", "verifier": "math", "level": 2, "prompt": "2+3"}]


def _seen(path):
    """What the functions recorded: they run on a copy (cloudpickled), so they write to a file."""
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_trl_batched_function_gets_the_ground_truth_and_the_other_columns(tmp_path):
    log = str(tmp_path / "seen.jsonl")

    def batched(completions, prompts, ground_truth, level, **kwargs):
        with open(log, "a") as fh:
            fh.write(json.dumps({"completions": completions, "prompts": prompts, "ground_truth": ground_truth,
                                 "level": level, "verifier": kwargs["verifier"]}) + "\n")
        return [float(c == g) for c, g in zip(completions, ground_truth)]

    scored = grpo_run.score(ROWS, reward_funcs=[batched])
    assert [s["scores"]["batched"] for s in scored] == [1.0, 0.0]
    assert _seen(tmp_path / "seen.jsonl") == [{"completions": ["4", "6"], "prompts": ["2+2", "2+3"],
                                               "ground_truth": ["4", "5"], "level": [1, 2],
                                               "verifier": ["math", "math"]}]


def test_a_per_sample_function_gets_the_ground_truth_and_the_other_columns_by_keyword(tmp_path):
    log = str(tmp_path / "seen.jsonl")

    def by_keyword(prompt, completion, ground_truth, **kwargs):
        with open(log, "a") as fh:
            fh.write(json.dumps([prompt, completion, ground_truth, kwargs["level"], kwargs["id"]]) + "\n")
        return float(completion == ground_truth)

    def positional(c, gt, row):
        with open(log, "a") as fh:
            fh.write(json.dumps([c, gt, row["level"]]) + "\n")
        return float(c == gt)

    scored = grpo_run.score(ROWS, reward_funcs=[by_keyword, positional])
    assert [s["scores"] for s in scored] == [{"math": 1.0, "by_keyword": 1.0, "positional": 1.0},
                                             {"math": 0.0, "by_keyword": 0.0, "positional": 0.0}]
    assert sorted(_seen(tmp_path / "seen.jsonl"), key=str) == sorted(
        [["2+2", "4", "4", 1, "row-0"], ["2+3", "6", "5", 2, "row-1"], ["4", "4", 1], ["6", "5", 2]], key=str)


def test_a_keyword_function_without_kwargs_gets_only_what_it_names():
    def exact(completion, ground_truth):
        return float(completion.strip() == ground_truth)

    assert [s["reward"] for s in grpo_run.score(ROWS, verifiers={}, reward_funcs=[exact])] == [1.0, 0.0]
