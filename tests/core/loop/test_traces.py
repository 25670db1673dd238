"""Rollout traces: a short run of the embedded task leaves traces that agree with its metrics
(reward, solve rate, advantages, filtering, lengths, staleness, eval accuracy, pass@k), and the
writer keeps to its size cap and feeds table-showing trackers."""

from __future__ import annotations

import json
import math
import statistics
from fractions import Fraction
from pathlib import Path

import pytest
import torch

from support.observed import GROUP_SIZE, GROUPS, observed_run

from grpo_run import Completion, CompletionTrace, LogsCompletions
from grpo_run.core.config.schema import AlgorithmSection
from grpo_run.core.loop.observers import StepEvent
from grpo_run.core.loop.traces import RolloutTraces, TraceWriter, train_traces
from grpo_run.core.rollout.sequences import RolloutBatch, RolloutGroup, group_signal


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return observed_run(tmp_path_factory)


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _metrics(run: Path) -> dict[int, dict]:
    return {row["step"]: row for row in _lines(run / "metrics.jsonl")}


def test_train_traces_agree_with_the_step_metrics(run: Path) -> None:
    metrics = _metrics(run)
    assert sorted(metrics) == [0, 1, 2, 3]
    for step in (1, 2, 3):
        traces, m = _lines(run / "rollouts" / f"step_{step}.jsonl"), metrics[step]
        assert len(traces) == GROUPS * GROUP_SIZE
        assert {t["kind"] for t in traces} == {"train"} and {t["step"] for t in traces} == {step}
        rewards = [t["reward"] for t in traces]
        assert math.fsum(rewards) / len(rewards) == pytest.approx(m["reward/mean"], abs=1e-12)
        assert statistics.stdev(rewards) == pytest.approx(m["reward/std"], abs=1e-12)
        assert sum(t["solved"] for t in traces) / len(traces) == pytest.approx(m["reward/solve_rate"], abs=1e-12)
        assert sum(t["num_tokens"] for t in traces) / len(traces) == pytest.approx(m["rollout/response_length_mean"], abs=1e-12)
        assert sum(t["finish_reason"] == "stop" for t in traces) / len(traces) == pytest.approx(m["rollout/stop_rate"], abs=1e-12)
        # The learner of step n trains on weights of version n - 1 (synchronous run: no staleness).
        assert (step - 1) - min(t["policy_version"] for t in traces) == m["rollout/staleness_max"] == 0
        assert all(t["scores"] == {"math": t["reward"]} for t in traces)  # one verifier, weight 1


def test_trace_advantages_and_filter_flags_are_the_group_statistics(run: Path) -> None:
    metrics = _metrics(run)
    for step in (1, 2, 3):
        traces = _lines(run / "rollouts" / f"step_{step}.jsonl")
        groups: dict[int, list[dict]] = {}
        for t in traces:
            groups.setdefault(t["group"], []).append(t)
        assert sorted(groups) == list(range(GROUPS))
        kept = 0
        for members in groups.values():
            assert [t["sample"] for t in members] == list(range(GROUP_SIZE))
            assert len({t["row_id"] for t in members}) == 1 and len({t["prompt"] for t in members}) == 1
            rewards = [t["reward"] for t in members]
            spread = max(rewards) != min(rewards)
            kept += spread
            assert all(t["filtered"] is (not spread) for t in members)  # filter_zero_std_samples = true
            mean, std = statistics.fmean(rewards), statistics.stdev(rewards)  # float64, Bessel-corrected
            for t, r in zip(members, rewards):
                assert t["advantage"] == pytest.approx((r - mean) / (std + 1e-6), abs=1e-9)
        assert kept / GROUPS == pytest.approx(metrics[step]["rollout/real_batch_size_ratio"], abs=1e-12)


def test_prompts_and_ground_truths_are_the_tasks(run: Path) -> None:
    t = _lines(run / "rollouts" / "step_1.jsonl")[0]
    a, b = t["prompt"].removeprefix("<|user|>").removesuffix("<|assistant|>").split("+")
    assert t["ground_truth"] == str(int(a) + int(b))
    assert t["row_id"].startswith("arith-train-")


def _exact_pass_at_k(n: int, c: int, k: int) -> Fraction:
    """1 - C(n-c, k) / C(n, k) with exact integers (the estimator's definition)."""
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


def test_eval_traces_agree_with_accuracy_and_pass_at_k(run: Path) -> None:
    metrics = _metrics(run)
    for step in (0, 2, 3):
        traces, m = _lines(run / "rollouts" / f"eval_{step}.jsonl"), metrics[step]
        greedy = [t for t in traces if t["greedy"]]
        sampled = [t for t in traces if not t["greedy"]]
        assert len(greedy) == m["eval/num_prompts"] == 24 and len(sampled) == 24 * 4
        assert sum(t["solved"] for t in greedy) / 24 == pytest.approx(m["eval/accuracy"], abs=1e-12)
        assert all(t["advantage"] is None and not t["filtered"] for t in traces)
        correct: dict[int, int] = {}
        for t in sampled:
            correct[t["group"]] = correct.get(t["group"], 0) + t["solved"]
        assert sorted(correct) == list(range(24))
        for k in range(1, 5):
            expected = sum(_exact_pass_at_k(4, c, k) for c in correct.values()) / 24
            assert m[f"eval/pass@{k}"] == pytest.approx(float(expected), abs=1e-12)
        assert "eval/pass@5" not in m


# -- the writer on its own ---------------------------------------------------------------------


def _trace(i: int, completion: str = "x") -> CompletionTrace:
    return CompletionTrace(kind="train", step=3, row_id=f"r{i}", group=i, sample=0, prompt="p", completion=completion,
                           ground_truth="g", reward=1.0, max_reward=1.0, solved=True, scores={"v": 1.0},
                           finish_reason="stop", num_tokens=1, policy_version=2, advantage=0.5)


class _Sink:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.calls: list[tuple[int, str, list[CompletionTrace]]] = []

    def log_completions(self, step: int, kind: str, traces) -> None:
        self.calls.append((step, kind, list(traces)))
        if self.fail:
            raise ConnectionError("dashboard down")


def test_size_cap_keeps_whole_records_and_hands_the_written_ones_to_sinks(tmp_path: Path) -> None:
    traces = [_trace(i, completion="y" * (10 * i)) for i in range(6)]
    sizes = [len((json.dumps(t.to_json(), ensure_ascii=False) + "\n").encode()) for t in traces]
    cap = sum(sizes[:4]) + sizes[4] - 1  # room for four records and most of the fifth
    sink, errors = _Sink(), []
    assert isinstance(sink, LogsCompletions)
    writer = TraceWriter(tmp_path, 1, cap, lambda ids: "", [sink], lambda s, e: errors.append(e))
    path = writer.write("train", 3, traces)
    assert path == tmp_path / "rollouts" / "step_3.jsonl"
    assert path.stat().st_size == sum(sizes[:4]) <= cap
    assert [r["row_id"] for r in _lines(path)] == ["r0", "r1", "r2", "r3"]
    assert sink.calls == [(3, "train", traces[:4])] and errors == []
    assert not list((tmp_path / "rollouts").glob(".*"))  # no temporary file left behind


def test_a_failing_sink_is_reported_and_the_trace_still_written(tmp_path: Path) -> None:
    bad, good, errors = _Sink(fail=True), _Sink(), []
    writer = TraceWriter(tmp_path, 1, 10_000, lambda ids: "", [bad, good], lambda s, e: errors.append((s, e)))
    path = writer.write("eval", 5, [_trace(0)])
    assert path.name == "eval_5.jsonl" and len(_lines(path)) == 1
    assert len(good.calls) == 1 and len(errors) == 1
    assert errors[0][0] is bad and isinstance(errors[0][1], ConnectionError)


def _batch() -> RolloutBatch:
    def comp(text: str, version: int) -> Completion:
        return Completion(token_ids=(5,) * len(text), logprobs=(-0.1,) * len(text), text=text,
                          finish_reason="stop" if text else "length", policy_version=version)

    spread = RolloutGroup(row={"id": "a", "ground_truth": 3}, prompt_ids=[1, 2], completions=[comp("3", 4), comp("4", 4)],
                          rewards=[1.0, 0.0], max_reward=1.0, scores=[{"math": 1.0}, {"math": 0.0}])
    tied = RolloutGroup(row={"id": "b", "ground_truth": [1, 2]}, prompt_ids=[3], completions=[comp("", 3), comp("", 4)],
                        rewards=[0.0, 0.0], max_reward=1.0, scores=[{"math": 0.0}, {"math": 0.0}])
    return RolloutBatch(6, [spread, tied], 0.1, {})


def test_train_traces_carry_each_completions_advantage_and_group_filter() -> None:
    batch = _batch()
    signal = group_signal(batch, AlgorithmSection(filter_zero_std_samples=True))
    traces = train_traces(StepEvent(6, {}, None, batch, signal), lambda ids: "|".join(map(str, ids)))
    # rewards [1, 0]: mean 0.5, sample std sqrt(0.5); advantage = +-0.5 / (sqrt(0.5) + 1e-6)
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    assert [(t.row_id, t.sample, t.prompt) for t in traces] == [("a", 0, "1|2"), ("a", 1, "1|2"), ("b", 0, "3"), ("b", 1, "3")]
    assert [t.advantage for t in traces] == pytest.approx([a, -a, 0.0, 0.0], abs=1e-12)
    assert [t.filtered for t in traces] == [False, False, True, True]
    assert [t.solved for t in traces] == [True, False, False, False]
    assert [(t.finish_reason, t.num_tokens, t.policy_version) for t in traces][2:] == [("length", 0, 3), ("length", 0, 4)]
    assert traces[2].to_json()["ground_truth"] == [1, 2] and traces[0].to_json()["scores"] == {"math": 1.0}


def test_the_observer_writes_every_nth_step_only(tmp_path: Path) -> None:
    batch = _batch()
    signal = group_signal(batch, AlgorithmSection())
    observer = RolloutTraces(TraceWriter(tmp_path, 2, 10_000, lambda ids: ""))
    for step in (1, 2, 3, 4):
        observer.on_step(StepEvent(step, {}, None, batch, signal))
    observer.on_step(StepEvent(0, {"eval/accuracy": 1.0}))  # the starting eval has no batch
    assert sorted(p.name for p in (tmp_path / "rollouts").iterdir()) == ["step_2.jsonl", "step_4.jsonl"]
    assert torch.equal(signal.keep, torch.tensor([True, False]))
