"""Planning a row's verifier calls and grouping calls into worker units, as plain functions."""

from __future__ import annotations

from grpo_run.core.scoring.planning import group_units, interleave_rows, plan_row
from grpo_run.core.scoring.policy import VerifierPolicy
from grpo_run.core.scoring.workers import VerifierCall


def policy(name: str, *, batched: bool = False, max_batch_size: int = 64) -> VerifierPolicy:
    return VerifierPolicy(name, 1.0, False, 0.0, False, (0.0, 1.0), False, batched, max_batch_size)


def test_a_row_names_its_verifiers_and_the_all_rows_ones_follow() -> None:
    errors: list[str] = []
    pairs = plan_row({"verifier": ["math", "code"], "ground_truth": ["4", "x"]}, None, ["math", "code", "format"],
                     ["format"], errors)
    # The all-rows verifiers get the row's ground truth as it is (a reward function compares with it).
    assert pairs == [("math", "4"), ("code", "x"), ("format", ["4", "x"])] and errors == []
    assert plan_row({"ground_truth": "4"}, "math", ["math"], [], errors) == [("math", "4")]
    # An all-rows verifier the row names itself is not asked twice.
    assert plan_row({"verifier": "format", "ground_truth": None}, None, ["format"], ["format"], errors) == [("format", None)]
    assert plan_row({"ground_truth": "7"}, None, ["f"], ["f"], errors) == [("f", "7")] and errors == []


def test_without_row_verifiers_only_the_all_rows_ones_score_and_the_verifier_column_is_data() -> None:
    errors: list[str] = []
    row = {"verifier": "math", "ground_truth": "4"}
    assert plan_row(row, None, ["f", "g"], ["f", "g"], errors, row_verifiers=False) == [("f", "4"), ("g", "4")]
    assert errors == []


def test_row_problems_are_reported_and_leave_only_what_can_run() -> None:
    errors: list[str] = []
    assert plan_row({"verifier": ["math", "code"], "ground_truth": "4"}, None, ["math", "code"], ["format"], errors) \
        == [("format", "4")]
    assert errors == ["verifier lists 2 names, so ground_truth must be a list of 2"]
    errors.clear()
    assert plan_row({"verifier": "sql", "ground_truth": "1"}, None, ["math"], [], errors) == []
    assert errors == ["verifier 'sql' is not enabled; enabled: math"]
    errors.clear()
    assert plan_row({"verifier": ["math", "math"], "ground_truth": [1, 2]}, None, ["math"], [], errors) == []
    assert errors == ["verifier names a verifier twice: ['math', 'math']"]


def test_batched_calls_share_units_capped_and_spread_over_workers() -> None:
    calls = [VerifierCall("judge" if i % 2 else "math", "c", "g", {}) for i in range(10)]
    policies = {"math": policy("math"), "judge": policy("judge", batched=True, max_batch_size=4)}
    units = group_units(calls, range(10), spread=1, policies=policies)
    # math: one unit per call; judge (5 calls): batches of at most 4, each where its first call was.
    assert units == [[0], [1, 3, 5, 7], [2], [4], [6], [8], [9]]
    # Spread over 3 workers: 5 judge calls make batches of ceil(5 / 3) = 2.
    spread = group_units(calls, range(10), spread=3, policies=policies)
    assert [u for u in spread if calls[u[0]].verifier == "judge"] == [[1, 3], [5, 7], [9]]


def test_calls_take_the_rows_in_turns_so_a_hung_verifier_times_out_on_different_rows_first() -> None:
    rows = {name: {"id": name} for name in "abc"}
    calls = [VerifierCall("v", str(i), None, rows[name]) for i, name in enumerate("aaabbc")]
    order = interleave_rows(calls, range(len(calls)))
    assert [calls[i].row["id"] for i in order] == list("abcaba")
    assert order == [0, 3, 5, 1, 4, 2]  # each row's own calls keep their order
    assert interleave_rows(calls, [1, 2, 4]) == [1, 4, 2]
    # Another verifier's call on a row is its own first turn, not the row's second.
    both = [VerifierCall("v", "0", None, rows["a"]), VerifierCall("w", "0", None, rows["a"]),
            VerifierCall("w", "1", None, rows["b"])]
    assert interleave_rows(both, range(3)) == [0, 1, 2]
