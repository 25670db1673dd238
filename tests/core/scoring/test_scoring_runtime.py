"""The scoring runtime beyond the basics: async and batched verifiers, reward scaling, gates,
score ranges, finish reasons, the error-rate stop and concurrent ``score()`` calls.

Everything runs in-process (``num_workers=0``) except one test that sends batches to a worker.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping
from typing import Any, ClassVar

import attrs
import pytest
import structlog
from support.scoring_helpers import ConstVerifier, ExactVerifier, MisbehavingVerifier

from grpo_run import VerifierConfig, VerifierResult
from grpo_run import ShapingVerifierConfig
from grpo_run.core.config.invariants import some_reward_enabled
from grpo_run.core.config.schema import RunConfig, ScoringSection
from grpo_run.core.errors import PluginError, RunError
from grpo_run.core.scoring.metrics import ScoringMetrics
from grpo_run.core.scoring.scorer import RewardScorer, ScoredCompletion

CANCELLED: list[str] = []
"""Completions whose async call was cancelled (the verifiers run in this process)."""
CLOSED: list[str] = []


class AsyncEcho:
    """``async``: "sleep:<s>" sleeps then scores 1; "hang" sleeps 60 s; "raise" raises;
    "own-timeout" raises its own TimeoutError; anything else scores 1 with the pid as a metric."""

    name: ClassVar[str] = "echo"
    Config: ClassVar[type] = VerifierConfig

    def __init__(self, config: VerifierConfig) -> None:
        self.config = config
        self.in_flight = 0
        self.peak = 0

    async def score(self, completion: str, ground_truth: Any, row: Mapping[str, Any]) -> VerifierResult:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            if completion.startswith("sleep:"):
                await asyncio.sleep(float(completion[6:]))
            elif completion == "hang":
                await asyncio.sleep(60)
            elif completion == "raise":
                raise RuntimeError("judge down")
            elif completion == "own-timeout":
                raise TimeoutError("upstream said timeout")
        except asyncio.CancelledError:
            CANCELLED.append(completion)
            raise
        finally:
            self.in_flight -= 1
        return VerifierResult(score=1.0, metrics={"pid": float(os.getpid())})

    async def aclose(self) -> None:
        CLOSED.append(self.name)


class BatchLength:
    """Batched: score = len(completion) / 10; "boom" in a batch raises, "short" returns one
    result too few. Records the size of every batch it got."""

    name: ClassVar[str] = "batch"
    Config: ClassVar[type] = VerifierConfig
    max_batch_size: ClassVar[int] = 3
    batches: ClassVar[list[int]] = []

    def __init__(self, config: VerifierConfig) -> None:
        self.config = config

    def score(self, completion: str, ground_truth: Any, row: Mapping[str, Any]) -> float:
        raise AssertionError("score_batch must be used")

    def score_batch(self, items: list[tuple[str, Any, Mapping[str, Any]]]) -> list[float]:
        type(self).batches.append(len(items))
        completions = [c for c, _, _ in items]
        if "boom" in completions:
            raise ValueError("batch exploded")
        if "hang" in completions:
            time.sleep(60)
        scores = [len(c) / 10 for c in completions]
        return scores[:-1] if "short" in completions else scores


class AsyncBatch(BatchLength):
    name: ClassVar[str] = "abatch"
    max_batch_size: ClassVar[int] = 64

    async def score_batch(self, items: list[tuple[str, Any, Mapping[str, Any]]]) -> list[float]:  # type: ignore[override]
        await asyncio.sleep(0.01)
        return [len(c) / 10 for c, _, _ in items]


class Penalty:
    """Score range [-1, 0]: -1 when the completion is "bad", else 0; "worse" returns -2 (out of range)."""

    name: ClassVar[str] = "penalty"
    Config: ClassVar[type] = ShapingVerifierConfig
    score_range: ClassVar[tuple[float, float]] = (-1.0, 0.0)

    def __init__(self, config: ShapingVerifierConfig) -> None:
        self.config = config

    def score(self, completion: str, ground_truth: Any, row: Mapping[str, Any]) -> float:
        return {"bad": -1.0, "worse": -2.0}.get(completion, 0.0)


class Gate:
    """1.0 unless the completion contains "nogate"; a gate when configured so."""

    name: ClassVar[str] = "gate"
    Config: ClassVar[type] = ShapingVerifierConfig

    def __init__(self, config: ShapingVerifierConfig) -> None:
        self.config = config

    def score(self, completion: str, ground_truth: Any, row: Mapping[str, Any]) -> float:
        if "gateraise" in completion:
            raise ValueError("gate broke")
        return 0.0 if "nogate" in completion else 1.0


class Recorder:
    """Scores 1; remembers the row mappings (plus the ground truth) it saw (in-process only)."""

    name: ClassVar[str] = "recorder"
    Config: ClassVar[type] = VerifierConfig
    seen: ClassVar[list[dict]] = []

    def __init__(self, config: VerifierConfig) -> None:
        self.config = config

    def score(self, completion: str, ground_truth: Any, row: Mapping[str, Any]) -> float:
        type(self).seen.append({**row, "gold": ground_truth})
        return 1.0


def rows_for(verifier: str, n: int, gold: Any = None) -> list[dict]:
    return [{"id": f"{verifier}-{i}", "verifier": verifier, "ground_truth": gold} for i in range(n)]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# -- async verifiers ---------------------------------------------------------------------------


def test_async_verifier_runs_on_the_event_loop_concurrently_with_sync_ones() -> None:
    scorer = RewardScorer({"echo": (AsyncEcho, VerifierConfig(weight=2.0)), "exact": (ExactVerifier, VerifierConfig())},
                          num_workers=0, timeout_s=5.0)
    rows = rows_for("echo", 20) + rows_for("exact", 2, gold="7")
    start = time.monotonic()
    results = run(scorer.score(rows, ["sleep:0.2"] * 20 + ["7", "8"]))
    elapsed = time.monotonic() - start
    assert [r.reward for r in results] == [2.0] * 20 + [1.0, 0.0]
    assert elapsed < 2.0  # 20 calls of 0.2 s overlap: far below the 4 s they take in a row
    verifier = scorer._async._instances["echo"]
    assert verifier.peak == 20
    metrics = results.metrics()
    assert metrics["verifier/echo/pid"] == float(os.getpid())  # in this process, not a worker
    assert metrics["verifier/echo/count"] == 20.0 and metrics["verifier/echo/mean_score"] == 1.0
    assert metrics["verifier/echo/latency_p50_ms"] >= 200.0
    scorer.close()


def test_async_timeout_cancels_the_call_and_does_not_hold_up_the_others() -> None:
    CANCELLED.clear()
    scorer = RewardScorer({"echo": (AsyncEcho, VerifierConfig())}, num_workers=0, timeout_s=0.5)

    async def score_while_ticking() -> tuple[list[ScoredCompletion], int, float]:
        ticks = 0
        start = time.monotonic()
        task = asyncio.ensure_future(
            scorer.score(rows_for("echo", 5), ["hang", "sleep:0.05", "raise", "own-timeout", "ok"])
        )
        while not task.done():
            await asyncio.sleep(0.01)
            ticks += 1
        return task.result(), ticks, time.monotonic() - start

    results, ticks, elapsed = run(score_while_ticking())
    assert 0.5 <= elapsed < 2.0 and ticks > 20
    assert [r.reward for r in results] == [0.0, 1.0, 0.0, 0.0, 1.0]
    assert results[0].error == "echo: timed out after 0.5s (cancelled)"
    assert CANCELLED == ["hang"]
    assert results[2].error == "echo: raised RuntimeError: judge down"
    # A TimeoutError of the verifier's own is an error, not a timeout of ours.
    assert results[3].error == "echo: raised TimeoutError: upstream said timeout"
    metrics = results.metrics()
    assert (metrics["verifier/echo/timeouts"], metrics["verifier/echo/errors"]) == (1.0, 2.0)
    scorer.close()


def test_async_verifiers_are_closed_with_aclose() -> None:
    CLOSED.clear()
    scorer = RewardScorer({"echo": (AsyncEcho, VerifierConfig())}, num_workers=0)
    run(scorer.score(rows_for("echo", 1), ["ok"]))
    scorer.close()  # outside any loop: runs aclose() itself
    assert CLOSED == ["echo"]
    scorer.close()
    assert CLOSED == ["echo"]

    async def inside_loop() -> None:
        other = RewardScorer({"echo": (AsyncEcho, VerifierConfig())}, num_workers=0)
        await other.score(rows_for("echo", 1), ["ok"])
        await other.aclose()

    run(inside_loop())
    assert CLOSED == ["echo", "echo"]
    # Never used: nothing was built, nothing to close.
    RewardScorer({"echo": (AsyncEcho, VerifierConfig())}, num_workers=0).close()
    assert CLOSED == ["echo", "echo"]


class BrokenAsync(AsyncEcho):
    name: ClassVar[str] = "broken"

    def __init__(self, config: VerifierConfig) -> None:
        raise KeyError("JUDGE_API_KEY")


def test_an_async_verifier_that_cannot_be_built_stops_with_a_run_error() -> None:
    scorer = RewardScorer({"broken": (BrokenAsync, VerifierConfig())}, num_workers=0)
    with pytest.raises(RunError, match="verifier 'broken' could not be built: raised KeyError: 'JUDGE_API_KEY'"):
        run(scorer.score(rows_for("broken", 1), ["x"]))


# -- batched verifiers -------------------------------------------------------------------------


def test_batched_verifier_gets_batches_of_at_most_max_batch_size() -> None:
    BatchLength.batches.clear()
    scorer = RewardScorer({"batch": (BatchLength, VerifierConfig()), "exact": (ExactVerifier, VerifierConfig())},
                          num_workers=0)
    rows = rows_for("batch", 7) + rows_for("exact", 1, gold="x")
    results = run(scorer.score(rows, ["a", "ab", "abc", "abcd", "abcde", "abcdef", "abcdefg", "x"]))
    assert [r.reward for r in results] == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 1.0], abs=1e-12)
    assert BatchLength.batches == [3, 3, 1]
    assert results.metrics()["verifier/batch/count"] == 7.0


def test_a_failing_batch_fails_every_item_in_it_only() -> None:
    BatchLength.batches.clear()
    scorer = RewardScorer({"batch": (BatchLength, VerifierConfig())}, num_workers=0)
    results = run(scorer.score(rows_for("batch", 6), ["a", "boom", "abc", "ab", "short", "abcd"]))
    assert [r.reward for r in results[:3]] == [0.0, 0.0, 0.0]
    assert {r.error for r in results[:3]} == {"batch: raised ValueError: batch exploded"}
    assert [r.reward for r in results[3:]] == [0.0, 0.0, 0.0]
    assert {r.error for r in results[3:]} == {"batch: raised TypeError: score_batch returned 2 results for 3 items"}
    assert results.metrics()["verifier/batch/errors"] == 6.0


def test_async_batched_verifier() -> None:
    scorer = RewardScorer({"abatch": (AsyncBatch, VerifierConfig(weight=10.0))}, num_workers=0)
    results = run(scorer.score(rows_for("abatch", 3), ["a", "ab", "abc"]))
    assert [r.reward for r in results] == pytest.approx([1.0, 2.0, 3.0], abs=1e-12)


def test_batches_in_a_worker_time_out_as_a_whole_and_the_worker_recovers() -> None:
    scorer = RewardScorer(
        {"batch": (BatchLength, VerifierConfig()), "flaky": (MisbehavingVerifier, VerifierConfig())},
        num_workers=1,
        timeout_s=0.5,
    )
    try:
        rows = rows_for("batch", 4) + rows_for("flaky", 1)
        # Batches of 3 (max_batch_size) and 1: the first hangs and is killed after 3 x 0.5 s.
        results = run(scorer.score(rows, ["a", "hang", "abc", "abcd", "ok"]))
        assert [r.reward for r in results] == pytest.approx([0.0, 0.0, 0.0, 0.4, 1.0], abs=1e-12)
        assert {r.error for r in results[:3]} == {"batch: batch of 3 timed out after 1.5s (worker killed)"}
        metrics = results.metrics()
        assert metrics["verifier/batch/timeouts"] == 3.0
        assert metrics["verifier/flaky/pid"] in scorer.worker_pids

        async def concurrently() -> list[list[ScoredCompletion]]:  # groups scored as they complete
            return await asyncio.gather(*(scorer.score(rows_for("batch", 5), ["a" * g] * 5) for g in range(1, 5)))

        groups = run(concurrently())
        assert [[r.reward for r in group] for group in groups] == [[g / 10] * 5 for g in range(1, 5)]
    finally:
        scorer.close()


# -- combining: scale, gates, ranges -----------------------------------------------------------


def test_verification_reward_scales_rewards_and_maxima() -> None:
    specs = {"exact": (ExactVerifier, VerifierConfig(weight=2.0)), "const": (ConstVerifier, ConstVerifier.Config(weight=3.0))}
    scorer = RewardScorer(specs, num_workers=0, verification_reward=10.0)
    rows = [{"id": 0, "verifier": ["exact", "const"], "ground_truth": ["1", None]}, *rows_for("exact", 1, gold="1")]
    results = run(scorer.score(rows, ["1", "2"]))
    # 10 x (2 x 1 + 3 x 0.5) = 35 of 10 x (2 + 3) = 50; 10 x (2 x 0) = 0 of 20
    assert results[0] == ScoredCompletion(reward=35.0, max_reward=50.0, scores={"exact": 1.0, "const": 0.5})
    assert results[1] == ScoredCompletion(reward=0.0, max_reward=20.0, scores={"exact": 0.0})
    assert scorer.max_possible_score == 30.0  # best single verifier: 10 x 3
    assert scorer.row_max_score(rows[0]) == 50.0
    with pytest.raises(ValueError, match="verification_reward"):
        RewardScorer(specs, num_workers=0, verification_reward=0.0)


@pytest.mark.parametrize(
    ("completion", "additive"),
    [("1", 3.5), ("2", 1.5), ("bad", 0.5)],  # exact 2 x {1, 0, 0} + const 3 x 0.5 + penalty 1 x {0, 0, -1}
)
def test_gate_replaces_any_reward_only_when_it_fails(completion: str, additive: float) -> None:
    specs = {
        "exact": (ExactVerifier, VerifierConfig(weight=2.0)),
        "const": (ConstVerifier, ConstVerifier.Config(weight=3.0)),
        "penalty": (Penalty, ShapingVerifierConfig(weight=1.0)),
        "gate": (Gate, ShapingVerifierConfig(mode="gate", gate_fail_reward=-0.25)),
    }
    scorer = RewardScorer(specs, num_workers=0, verification_reward=2.0)
    rows = [{"id": i, "verifier": ["exact", "const"], "ground_truth": ["1", None]} for i in range(3)]
    passed, failed, broken = run(scorer.score(rows, [completion, completion + " nogate", completion + " gateraise"]))
    assert passed.reward == pytest.approx(2.0 * additive, abs=1e-12) and not passed.gated
    # Scaled rewards 7, 3 and 1 alike become exactly the gate's reward; a broken gate fails too.
    assert (failed.reward, failed.gated, failed.scores["gate"]) == (-0.25, True, 0.0)
    assert (broken.reward, broken.gated) == (-0.25, True) and "gate broke" in broken.error
    # Gates add nothing to the maximum; the penalty's range tops out at 0.
    assert passed.max_reward == failed.max_reward == 2.0 * (2.0 + 3.0)
    assert scorer.max_possible_score == 2.0 * (3.0 + 0.0)  # the best routed verifier (const: 3) + all-rows (0)


def test_gated_rows_are_counted_and_an_all_gated_batch_is_logged() -> None:
    specs = {"exact": (ExactVerifier, VerifierConfig()), "gate": (Gate, ShapingVerifierConfig(mode="gate"))}
    scorer = RewardScorer(specs, num_workers=0)
    rows = rows_for("exact", 4, gold="1")
    with structlog.testing.capture_logs() as logs:
        results = run(scorer.score(rows, ["1", "1 nogate", "1", "1"]))
    assert logs == []
    assert results.metrics()["scoring/gated_fraction"] == 0.25
    with structlog.testing.capture_logs() as logs:
        results = run(scorer.score(rows, ["1 nogate"] * 4))
    assert [log["event"] for log in logs] == ["every row failed a gate: all rewards are a gate_fail_reward"]
    assert results.metrics()["scoring/gated_fraction"] == 1.0


def test_several_failing_gates_give_the_lowest_gate_reward_and_negative_rewards_are_gated_too() -> None:
    specs = {
        "penalty": (Penalty, ShapingVerifierConfig(weight=4.0)),
        "gate": (Gate, ShapingVerifierConfig(mode="gate", gate_fail_reward=0.0)),
        "gate2": (Gate, ShapingVerifierConfig(mode="gate", gate_fail_reward=-1.0, all_rows=False)),
    }
    scorer = RewardScorer(specs, num_workers=0)
    rows = [{"id": 0, "verifier": "gate2", "ground_truth": None}, {"id": 1}]
    both, one = run(scorer.score(rows, ["bad nogate", "bad nogate"]))
    assert both.reward == -1.0
    assert one.reward == 0.0  # -4 from the penalty, replaced by the failing all-rows gate
    assert run(scorer.score([{"id": 2}], ["bad"]))[0].reward == -4.0


def test_score_ranges_are_enforced_per_verifier() -> None:
    scorer = RewardScorer({"penalty": (Penalty, ShapingVerifierConfig()), "flaky": (MisbehavingVerifier, VerifierConfig())},
                          num_workers=0)
    results = run(scorer.score([{"id": 0}, {"id": 1}], ["bad", "worse"]))
    assert results[0].scores == {"penalty": -1.0} and results[0].error is None
    assert results[1].error == "penalty: returned score -2.0, expected a finite number in [-1, 0]"
    bad = run(scorer.score([{"id": 2, "verifier": "flaky"}], ["big"]))[0]
    assert "expected a finite number in [0, 1]" in bad.error


def test_all_rows_verifiers_score_rows_that_name_other_verifiers_or_none() -> None:
    Recorder.seen.clear()
    specs = {"exact": (ExactVerifier, VerifierConfig()), "recorder": (Recorder, ShapingVerifierConfig(weight=0.5))}
    scorer = RewardScorer(specs, num_workers=0)
    rows = [{"id": 0, "verifier": "exact", "ground_truth": "1"}, {"id": 1}, {"id": 2, "verifier": "recorder", "ground_truth": 7}]
    results = run(scorer.score(rows, ["1", "x", "x"], finish_reasons=["stop", "length", "stop"], num_tokens=[1, 5, 9]))
    assert [r.reward for r in results] == [1.5, 0.5, 0.5]
    assert [r.max_reward for r in results] == [1.5, 0.5, 0.5]
    assert [(s["id"], s["gold"], s["finish_reason"], s["num_tokens"]) for s in Recorder.seen] == [
        (0, "1", "stop", 1),  # the row's ground truth, as it is; the row with the finish reason and length
        (1, None, "length", 5),  # a row without one: None
        (2, 7, "stop", 9),  # a row naming the all-rows verifier gives it its own ground truth
    ]
    with pytest.raises(ValueError, match="3 rows but 2 finish_reasons"):
        run(scorer.score(rows, ["1", "x", "x"], finish_reasons=["stop", "stop"]))


# -- error-rate stop ---------------------------------------------------------------------------


def test_error_rate_over_the_limit_stops_with_a_clear_message() -> None:
    specs = {"flaky": (MisbehavingVerifier, VerifierConfig())}
    scorer = RewardScorer(specs, num_workers=0, max_error_rate=0.5, error_window=10, error_min_calls=6, max_logged_errors=0)
    rows = rows_for("flaky", 4)
    run(scorer.score(rows, ["raise", "raise", "raise", "ok"]))  # 4 calls: below error_min_calls
    run(scorer.score(rows[:2], ["ok", "ok"]))  # 3 of 6 failed: 50% is not above 50%
    with pytest.raises(RunError) as caught:
        run(scorer.score(rows[:1], ["nan"]))  # 4 of 7
    message = str(caught.value)
    assert "verifier 'flaky' failed 4 of its last 7 calls (57%, above scoring.max_error_rate = 0.5)" in message
    assert "last error (row 'flaky-0'): returned score nan" in message
    assert "1.0 disables this check" in message
    # The window slides: 3 failures in 7 calls are 43% overall but 75% of the last 4.
    sliding = RewardScorer(specs, num_workers=0, max_error_rate=0.5, error_window=4, error_min_calls=4, max_logged_errors=0)
    run(sliding.score(rows, ["ok"] * 4))
    run(sliding.score(rows[:2], ["raise", "raise"]))  # last 4: ok ok raise raise = 50%
    with pytest.raises(RunError, match="failed 3 of its last 4 calls"):
        run(sliding.score(rows[:1], ["raise"]))
    disabled = RewardScorer(specs, num_workers=0, max_logged_errors=0)  # default max_error_rate = 1.0
    run(disabled.score(rows_for("flaky", 60), ["raise"] * 60))


def test_each_call_reports_its_own_metrics_and_all_count_toward_the_error_rate() -> None:
    specs = {"flaky": (MisbehavingVerifier, VerifierConfig())}
    scorer = RewardScorer(specs, num_workers=0, max_error_rate=0.5, error_window=4, error_min_calls=4, max_logged_errors=0)
    first = run(scorer.score(rows_for("flaky", 2), ["ok", "raise"]))
    second = run(scorer.score(rows_for("flaky", 1) + [{"id": "x", "verifier": "nope"}], ["ok", "1"]))
    metrics = first.metrics()  # only the first call's
    assert (metrics["verifier/flaky/calls"], metrics["verifier/flaky/errors"], metrics["scoring/row_errors"]) == (2, 1, 0)
    metrics = second.metrics()
    assert (metrics["verifier/flaky/calls"], metrics["verifier/flaky/errors"], metrics["scoring/row_errors"]) == (1, 0, 1)
    with pytest.raises(RunError, match="failed 3 of its last 4 calls"):
        run(scorer.score(rows_for("flaky", 2), ["raise", "raise"]))


def test_from_config_passes_the_scoring_section() -> None:
    section = ScoringSection(num_workers=0, timeout_s=2.0, verification_reward=3.0, max_error_rate=0.0,
                             error_window=5, error_min_calls=1)
    scorer = RewardScorer.from_config(section, {"flaky": (MisbehavingVerifier, VerifierConfig())}, max_logged_errors=0)
    assert (scorer.num_workers, scorer.timeout_s, scorer.verification_reward) == (0, 2.0, 3.0)
    with pytest.raises(RunError, match="'flaky' failed 1 of its last 1 calls"):
        run(scorer.score(rows_for("flaky", 1), ["raise"]))


def test_scoring_section_and_invariant_validation() -> None:
    with pytest.raises(ValueError, match="must be <= scoring.error_window"):
        ScoringSection(error_window=10, error_min_calls=20)
    with pytest.raises(ValueError, match="verification_reward"):
        ScoringSection(verification_reward=0.0)
    with pytest.raises(ValueError, match="max_error_rate"):
        ScoringSection(max_error_rate=1.5)
    gates_only = RunConfig(verifiers={"format": ShapingVerifierConfig(mode="gate")})
    assert "every enabled verifier is a gate" in some_reward_enabled(gates_only)[0].message
    assert some_reward_enabled(RunConfig(verifiers={"format": ShapingVerifierConfig(), "math": VerifierConfig()})) == []


# -- concurrency -------------------------------------------------------------------------------


def test_concurrent_score_calls_from_several_tasks() -> None:
    specs = {"echo": (AsyncEcho, VerifierConfig()), "exact": (ExactVerifier, VerifierConfig(weight=2.0))}
    scorer = RewardScorer(specs, num_workers=0)

    async def groups() -> list[list[ScoredCompletion]]:
        tasks = []
        for g in range(8):
            rows = rows_for("exact", 4, gold=str(g)) + rows_for("echo", 2)
            completions = [str(g), str(g), "no", str(g), f"sleep:0.0{g}", "ok"]
            tasks.append(scorer.score(rows, completions))
        return await asyncio.gather(*tasks)

    results = run(groups())
    for group in results:
        assert [r.reward for r in group] == [2.0, 2.0, 0.0, 2.0, 1.0, 1.0]
        metrics = group.metrics()  # each concurrent call's own, however they interleaved
        assert metrics["verifier/exact/calls"] == 4.0 and metrics["verifier/echo/calls"] == 2.0
    merged = ScoringMetrics()
    for group in results:
        merged.merge(group.stats)
    assert merged.report()["verifier/exact/calls"] == 32.0 and merged.report()["verifier/echo/calls"] == 16.0
    scorer.close()


class HugeRange(Penalty):
    score_range: ClassVar[tuple[float, float]] = (0.0, 1e9)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ((HugeRange, ShapingVerifierConfig()),
         r"verifier 'v': score_range must lie within \[-1e\+06, 1e\+06\] \(scale rewards down\), got \[0, 1e\+09\]"),
        ((Penalty, ShapingVerifierConfig(weight=1e6)),  # a penalty in [-1, 0] at weight 1e6: 1e6, allowed
         None),
        ((ExactVerifier, VerifierConfig(weight=1e4)), None),
    ],
)
def test_a_verifier_whose_weighted_scores_pass_1e6_is_refused_in_one_line(spec, message) -> None:
    if message is None:
        RewardScorer({"v": spec}, num_workers=0)
        return
    with pytest.raises(PluginError, match=f"^{message}$"):
        RewardScorer({"v": spec}, num_workers=0)


def test_weight_times_score_range_is_bounded_where_a_config_redeclares_weight() -> None:
    @attrs.frozen
    class Loose(VerifierConfig):
        weight: float = 1.0  # no validator
        score_range: tuple[float, float] = (-1e3, 1e3)

    with pytest.raises(PluginError, match=r"weight x score_range reaches 1e\+07 \(weight 10000, score_range "
                                          r"\[-1000.0, 1000.0\]\), past 1e\+06"):
        RewardScorer({"v": (ExactVerifier, Loose(weight=1e4))}, num_workers=0)
    with pytest.raises(PluginError, match=r"^verifier 'v': weight must be a number in \[0, 1e\+06\], got inf$"):
        RewardScorer({"v": (ExactVerifier, Loose(weight=float("inf"), score_range=(0, 1)))}, num_workers=0)
    with pytest.raises(ValueError, match=r"^gate_fail_reward must be a finite number in \[-1e\+06, 1e\+06\]"):
        ShapingVerifierConfig(mode="gate", gate_fail_reward=-1e9)
