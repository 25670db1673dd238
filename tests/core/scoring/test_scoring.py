"""The scoring runtime: weighted rewards, isolation of failing/hanging verifiers, metrics, shutdown.

Most tests run in-process (``num_workers=0``) and are instant; the worker-process tests share one
scorer because each worker start imports the package (~2-4 s on this machine).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import time
from collections.abc import Iterator

import pytest
import structlog
from support.scoring_helpers import ConstVerifier, ExactVerifier, MisbehavingVerifier

from grpo_run import VerifierConfig
from grpo_run.core.scoring.scorer import RewardScorer, ScoredCompletion
from grpo_run.plugins.verifiers.math import MathVerifier

SPECS = {
    "exact": (ExactVerifier, VerifierConfig(weight=2.0)),
    "const": (ConstVerifier, ConstVerifier.Config(weight=3.0, value=0.5)),
    "flaky": (MisbehavingVerifier, VerifierConfig(weight=1.0)),
}


def flaky_rows(n: int) -> list[dict]:
    return [{"id": f"r{i}", "ground_truth": None, "verifier": "flaky"} for i in range(n)]


def score(scorer: RewardScorer, rows: list[dict], completions: list[str]) -> list[ScoredCompletion]:
    return asyncio.run(scorer.score(rows, completions))


@pytest.fixture
def local_scorer() -> Iterator[RewardScorer]:
    scorer = RewardScorer(SPECS, num_workers=0, default_verifier="exact")
    yield scorer
    scorer.close()


@pytest.fixture(scope="module")
def worker_scorer() -> Iterator[RewardScorer]:
    specs = {**SPECS, "math": (MathVerifier, MathVerifier.Config(weight=1.0))}
    scorer = RewardScorer(specs, num_workers=1, timeout_s=3.0, chunk_size=2)
    scorer.start()
    yield scorer
    scorer.close()


# -- combining rewards (in-process) ----------------------------------------------------------------


def test_rewards_combine_with_weights_across_verifiers(local_scorer: RewardScorer) -> None:
    rows = [
        {"id": "both-right", "verifier": ["exact", "const"], "ground_truth": ["19", None]},
        {"id": "both-wrong-exact", "verifier": ["exact", "const"], "ground_truth": ["19", None]},
        {"id": "const-only", "verifier": "const", "ground_truth": None},
        {"id": "default", "ground_truth": "7"},  # no "verifier": default_verifier "exact"
    ]
    results = score(local_scorer, rows, ["19", "18", "x", "7"])
    # both-right: 2.0 * 1 + 3.0 * 0.5 = 3.5 of 2.0 + 3.0 = 5.0
    assert results[0] == ScoredCompletion(reward=3.5, max_reward=5.0, scores={"exact": 1.0, "const": 0.5})
    # both-wrong-exact: 2.0 * 0 + 3.0 * 0.5 = 1.5 of 5.0
    assert results[1] == ScoredCompletion(reward=1.5, max_reward=5.0, scores={"exact": 0.0, "const": 0.5})
    assert results[2] == ScoredCompletion(reward=1.5, max_reward=3.0, scores={"const": 0.5})
    assert results[3] == ScoredCompletion(reward=2.0, max_reward=2.0, scores={"exact": 1.0})


def test_unknown_verifier_is_a_row_error_naming_the_enabled_ones(local_scorer: RewardScorer) -> None:
    rows = [
        {"id": "a", "verifier": "nope", "ground_truth": "1"},
        {"id": "b", "verifier": ["exact", "nope"], "ground_truth": ["1", "1"]},
    ]
    with structlog.testing.capture_logs() as logs:
        results = score(local_scorer, rows, ["1", "1"])
    assert results[0].reward == 0.0 and results[0].max_reward == 0.0 and results[0].scores == {}
    assert results[0].error == "verifier 'nope' is not enabled; enabled: exact, const, flaky"
    # The enabled verifier of the row is still scored.
    assert results[1].reward == 2.0 and results[1].scores == {"exact": 1.0}
    assert "'nope' is not enabled" in results[1].error
    assert [log["row_id"] for log in logs] == ["a", "b"]
    assert results.metrics()["scoring/row_errors"] == 2.0


def test_malformed_rows_are_row_errors(local_scorer: RewardScorer) -> None:
    rows = [
        {"id": "short", "verifier": ["exact", "const"], "ground_truth": ["1"]},
        {"id": "twice", "verifier": ["exact", "exact"], "ground_truth": ["1", "1"]},
        {"id": "bad", "verifier": 3, "ground_truth": "1"},
    ]
    results = score(local_scorer, rows, ["1", "1", "1"])
    assert [r.reward for r in results] == [0.0, 0.0, 0.0]
    assert "ground_truth must be a list of 2" in results[0].error
    assert "twice" in results[1].error
    assert "must be a name or a list of names" in results[2].error


def test_failing_calls_score_zero_count_as_errors_and_log_the_row_id(local_scorer: RewardScorer) -> None:
    completions = ["raise", "nan", "type", "big", "ok"]
    with structlog.testing.capture_logs() as logs:
        results = score(local_scorer, flaky_rows(5), completions)
    assert [r.reward for r in results] == [0.0, 0.0, 0.0, 0.0, 1.0]
    assert [r.scores for r in results[:4]] == [{"flaky": 0.0}] * 4
    assert results[0].error == "flaky: raised ValueError: boom"
    assert "nan" in results[1].error
    assert "returned str" in results[2].error
    assert "2.0" in results[3].error and "[0, 1]" in results[3].error
    assert results[4].error is None
    assert [(log["row_id"], log["verifier"]) for log in logs] == [(f"r{i}", "flaky") for i in range(4)]
    metrics = results.metrics()
    assert metrics["verifier/flaky/errors"] == 4.0
    assert metrics["verifier/flaky/timeouts"] == 0.0
    assert metrics["verifier/flaky/mean_score"] == pytest.approx(1 / 5, abs=1e-12)


def test_only_the_first_failures_are_logged() -> None:
    scorer = RewardScorer(SPECS, num_workers=0, max_logged_errors=2)
    with structlog.testing.capture_logs() as logs:
        results = score(scorer, flaky_rows(5), ["raise"] * 5)
    assert len(logs) == 2
    assert results.metrics()["verifier/flaky/errors"] == 5.0


def test_not_applicable_adds_nothing(local_scorer: RewardScorer) -> None:
    results = score(local_scorer, flaky_rows(1), ["skip"])
    assert results[0] == ScoredCompletion(reward=0.0, max_reward=0.0, scores={})


def test_metrics_keys_and_values_belong_to_their_call(local_scorer: RewardScorer) -> None:
    rows = [{"id": i, "verifier": "exact", "ground_truth": "1"} for i in range(4)]
    results = score(local_scorer, rows, ["1", "1", "1", "2"])
    metrics = results.metrics()
    prefix = "verifier/exact/"
    expected = {"calls", "count", "mean_score", "correct_rate", "latency_p50_ms", "latency_p95_ms", "errors", "timeouts"}
    assert {k[len(prefix) :] for k in metrics if k.startswith(prefix)} == expected
    assert metrics[prefix + "calls"] == metrics[prefix + "count"] == 4.0
    assert metrics[prefix + "mean_score"] == 0.75
    assert metrics[prefix + "correct_rate"] == 0.75
    assert 0.0 <= metrics[prefix + "latency_p50_ms"] <= metrics[prefix + "latency_p95_ms"] < 1000.0
    later = score(local_scorer, flaky_rows(1), ["ok"]).metrics()
    assert "verifier/exact/calls" not in later and later["verifier/flaky/calls"] == 1.0
    assert results.metrics() == metrics  # reporting does not reset


def test_bad_arguments_are_rejected() -> None:
    with pytest.raises(ValueError, match="default_verifier 'math' is not enabled"):
        RewardScorer(SPECS, num_workers=0, default_verifier="math")
    with pytest.raises(ValueError, match="at least one"):
        RewardScorer({}, num_workers=0)
    with pytest.raises(ValueError, match="timeout_s"):
        RewardScorer(SPECS, num_workers=0, timeout_s=0)
    local = RewardScorer(SPECS, num_workers=0)
    with pytest.raises(ValueError, match="2 rows but 1 completions"):
        asyncio.run(local.score(flaky_rows(2), ["ok"]))


def test_unpicklable_verifier_is_rejected_up_front() -> None:
    class LocalVerifier(ExactVerifier):
        name = "local"

    with pytest.raises(ValueError, match="'local'.*picklable"):
        RewardScorer({"local": (LocalVerifier, VerifierConfig())}, num_workers=1)


# -- worker processes ------------------------------------------------------------------------------


def test_workers_score_math_out_of_process(worker_scorer: RewardScorer) -> None:
    rows = [{"id": i, "verifier": "math", "ground_truth": "\\frac{1}{2}"} for i in range(3)]
    results = score(worker_scorer, rows + flaky_rows(1), ["0.5", "The answer is $\\boxed{1/2}$", "2", "ok"])
    assert [r.reward for r in results] == [1.0, 1.0, 0.0, 1.0]
    metrics = results.metrics()
    assert metrics["verifier/flaky/pid"] != float(os.getpid())
    assert metrics["verifier/flaky/pid"] in worker_scorer.worker_pids


def test_hanging_verifier_is_killed_at_the_timeout_and_the_scorer_recovers(worker_scorer: RewardScorer) -> None:
    pid_before = worker_scorer.worker_pids

    async def score_while_ticking() -> tuple[list[ScoredCompletion], int]:
        ticks = 0
        task = asyncio.ensure_future(worker_scorer.score(flaky_rows(5), ["ok", "hang", "raise", "ok", "exit"]))
        while not task.done():  # the event loop must stay free while the worker runs
            await asyncio.sleep(0.01)
            ticks += 1
        return task.result(), ticks

    start = time.monotonic()
    with structlog.testing.capture_logs() as logs:
        results, ticks = asyncio.run(score_while_ticking())
    elapsed = time.monotonic() - start
    assert elapsed < 30.0  # the verifier sleeps 60 s; timeout 3 s + two worker restarts
    assert ticks > 50
    assert [r.reward for r in results] == [1.0, 0.0, 0.0, 1.0, 0.0]
    assert results[1].error == "flaky: timed out after 3s (worker killed)"
    assert results[2].error == "flaky: raised ValueError: boom"
    assert results[4].error == "flaky: worker process died (exit code 3)"
    assert {log["event"] for log in logs} == {"verifier timed out", "verifier failed"}
    metrics = results.metrics()
    assert metrics["verifier/flaky/timeouts"] == 1.0
    assert metrics["verifier/flaky/errors"] == 2.0
    # A fresh worker takes over and keeps working.
    assert [r.reward for r in score(worker_scorer, flaky_rows(2), ["ok", "ok"])] == [1.0, 1.0]
    assert len(worker_scorer.worker_pids) == 1 and worker_scorer.worker_pids != pid_before
    # An idle worker killed from outside is replaced on the next chunk.
    os.kill(worker_scorer.worker_pids[0], signal.SIGKILL)
    assert [r.reward for r in score(worker_scorer, flaky_rows(1), ["ok"])] == [1.0]


def test_two_workers_keep_order_and_close_leaves_no_processes() -> None:
    scorer = RewardScorer(SPECS, num_workers=2, chunk_size=3)
    rows = [{"id": i, "verifier": "exact", "ground_truth": str(i)} for i in range(20)]
    completions = [str(i) if i % 3 else "wrong" for i in range(20)]
    results = score(scorer, rows, completions)
    assert [r.reward for r in results] == [0.0 if i % 3 == 0 else 2.0 for i in range(20)]
    pids = scorer.worker_pids
    assert len(pids) == 2
    scorer.close()
    assert [p for p in multiprocessing.active_children() if p.pid in pids] == []
    assert not any(os.path.exists(f"/proc/{pid}") for pid in pids)
    assert scorer.worker_pids == []
    with pytest.raises(RuntimeError, match="after close"):
        score(scorer, rows, completions)


def test_means_are_left_out_when_there_is_nothing_to_average(local_scorer: RewardScorer) -> None:
    metrics = score(local_scorer, flaky_rows(1), ["skip"]).metrics()
    assert metrics["verifier/flaky/count"] == 0.0
    assert "verifier/flaky/mean_score" not in metrics and "verifier/flaky/correct_rate" not in metrics


class _Penalty:
    """Scores in [-1, 0]: 0 means no penalty, the best a row can get."""

    name = "penalty"
    Config = VerifierConfig
    score_range = (-1.0, 0.0)

    def __init__(self, config: VerifierConfig) -> None:
        self.config = config

    def score(self, completion: str, ground_truth: object, row: object) -> float:
        return -1.0 if completion == "bad" else 0.0


def test_correct_rate_counts_scores_at_the_top_of_the_declared_range() -> None:
    scorer = RewardScorer({"penalty": (_Penalty, VerifierConfig())}, num_workers=0)
    rows = [{"id": i, "verifier": "penalty", "ground_truth": None} for i in range(4)]
    metrics = score(scorer, rows, ["ok", "bad", "ok", "ok"]).metrics()
    assert metrics["verifier/penalty/mean_score"] == -0.25
    assert metrics["verifier/penalty/correct_rate"] == 0.75  # was 0.0: it counted score == 1.0
