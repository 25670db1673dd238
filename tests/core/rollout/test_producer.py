"""The rollout producer: groups in row order, scored in as few scorer calls as arrive together."""

from __future__ import annotations

import asyncio

import pytest

from grpo_run.core.plugins.types import Completion, SamplingParams
from grpo_run.core.rollout.producer import RolloutProducer
from grpo_run.core.scoring.metrics import ScoringMetrics
from grpo_run.core.scoring.scorer import ScoredBatch, ScoredCompletion

N = 3  # samples per prompt


def completions(i: int) -> list[Completion]:
    return [Completion((1, 2), (-0.5, -0.5), f"p{i}s{k}", "stop", 0) for k in range(N)]


class Encoder:
    def encode(self, row):
        return [int(row["id"]) + 10]


class Sampler:
    def __init__(self) -> None:
        self.updates: list[tuple[str, list[float]]] = []

    def sample(self, n):
        return [{"id": str(i)} for i in range(n)]

    def update(self, row_id, rewards, solved):  # a RewardFeedbackSampler
        self.updates.append((row_id, list(rewards)))

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


class Scorer:
    """Reward = the sample index k of text ``p{i}s{k}``; records each call's texts."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[list[str]] = []
        self.fail = fail

    async def score(self, rows, texts, finish_reasons=None, num_tokens=None, *, training=True):
        self.calls.append(list(texts))
        await asyncio.sleep(0)
        if self.fail:
            raise RuntimeError("scorer broke")
        results = [ScoredCompletion(float(t.split("s")[1]), 2.0, {"v": 1.0}) for t in texts]
        return ScoredBatch(results, ScoringMetrics())


class PlainEngine:
    async def generate(self, prompts, params):
        return [completions(p[0] - 10) for p in prompts]


class BurstEngine:
    """Streams groups in bursts (as the hf engine does per generate call), reversed within each."""

    def __init__(self, bursts: list[list[int]], fail_after: int | None = None) -> None:
        self.bursts = bursts
        self.fail_after = fail_after

    async def generate(self, prompts, params):  # pragma: no cover -- the stream is used
        raise AssertionError

    async def generate_stream(self, prompts, params):
        for b, burst in enumerate(self.bursts):
            if b == self.fail_after:
                raise ValueError("engine broke")
            await asyncio.sleep(0.01)  # the generate call
            for i in reversed(burst):
                yield i, completions(i)


def produce(engine, scorer, num_prompts: int = 4):
    sampler = Sampler()
    producer = RolloutProducer(sampler, engine, scorer, Encoder(), SamplingParams(n=N), num_prompts)
    return asyncio.run(producer.produce(1)), sampler


def test_plain_engine_groups_are_scored_in_one_call_and_come_back_in_row_order() -> None:
    scorer = Scorer()
    batch, sampler = produce(PlainEngine(), scorer)
    assert len(scorer.calls) == 1 and len(scorer.calls[0]) == 4 * N
    assert [g.row["id"] for g in batch.groups] == ["0", "1", "2", "3"]
    assert [g.prompt_ids for g in batch.groups] == [[10], [11], [12], [13]]
    for i, g in enumerate(batch.groups):
        assert [c.text for c in g.completions] == [f"p{i}s{k}" for k in range(N)]
        assert g.rewards == [0.0, 1.0, 2.0] and g.max_reward == 2.0
    assert sorted(sampler.updates) == [(str(i), [0.0, 1.0, 2.0]) for i in range(4)]


def test_streamed_bursts_are_scored_one_call_per_burst() -> None:
    scorer = Scorer()
    batch, _ = produce(BurstEngine([[0, 1], [2, 3, 4], [5]]), scorer, num_prompts=6)
    # One scorer call per generate call's burst, each holding that burst's groups.
    assert [sorted({t.split("s")[0] for t in call}) for call in scorer.calls] == [
        ["p0", "p1"], ["p2", "p3", "p4"], ["p5"]]
    assert [g.row["id"] for g in batch.groups] == [str(i) for i in range(6)]
    assert all(g.rewards == [0.0, 1.0, 2.0] for g in batch.groups)


def test_a_generation_error_surfaces_after_scoring_what_arrived() -> None:
    scorer = Scorer()
    with pytest.raises(ValueError, match="engine broke"):
        produce(BurstEngine([[0, 1], [2, 3]], fail_after=1), scorer)
    assert len(scorer.calls) == 1


def test_a_scoring_error_cancels_generation() -> None:
    with pytest.raises(RuntimeError, match="scorer broke"):
        produce(BurstEngine([[0], [1], [2], [3]]), Scorer(fail=True))


class RefillingSampler(Sampler):
    """Active sampling's ability: rows 0, 1, 2, ... in order across calls."""

    wants_nonzero_std = True

    def __init__(self) -> None:
        super().__init__()
        self.next = 0

    def sample(self, n):
        rows = [{"id": str(i)} for i in range(self.next, self.next + n)]
        self.next += n
        return rows


class RoundingScorer(Scorer):
    """Even rows: rewards 1e6 apart from each other by one float rounding step (no spread);
    odd rows: 0, 1, 2."""

    async def score(self, rows, texts, finish_reasons=None, num_tokens=None):
        rewards = [1e6 + (1.2e-10 if t.endswith("s0") else 0.0) if int(r["id"]) % 2 == 0 else float(t.split("s")[1])
                   for r, t in zip(rows, texts)]
        return ScoredBatch([ScoredCompletion(x, 2e6, {"v": 1.0}) for x in rewards], ScoringMetrics())


def test_active_sampling_refill_drops_what_the_training_filter_drops() -> None:
    from grpo_run.core.config.schema import AlgorithmSection
    from grpo_run.core.rollout.sequences import group_signal

    producer = RolloutProducer(RefillingSampler(), PlainEngine(), RoundingScorer(), Encoder(), SamplingParams(n=N), 2)
    batch = asyncio.run(producer.produce(1))
    # Rows 0 and 2 have no spread: refilled by rows 1 and 3, and the filter keeps both.
    assert [g.row["id"] for g in batch.groups] == ["1", "3"]
    signal = group_signal(batch, AlgorithmSection())
    assert signal is not None and signal.keep.tolist() == [True, True]
