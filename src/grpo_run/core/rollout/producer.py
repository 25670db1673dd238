"""Producing one rollout batch: sample prompts, generate, score each group as it completes.

A :class:`~grpo_run.StreamingEngine` gets every group scored while the rest are still
generating; other engines are scored when their ``generate`` call returns. A
:class:`~grpo_run.RefillingSampler` (active sampling) gets more prompts drawn until the batch
holds enough groups with a reward spread; a :class:`~grpo_run.RewardFeedbackSampler` hears every
group's rewards.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from grpo_run.core.data.prompts import PromptEncoder
from grpo_run.core.plugins.abilities import RefillingSampler, RewardFeedbackSampler, Stateful, StreamingEngine
from grpo_run.core.plugins.contracts import GenerationEngine, Sampler
from grpo_run.core.plugins.types import Completion, SamplingParams
from grpo_run.core.rollout.seeds import train_seed
from grpo_run.core.rollout.sequences import RolloutBatch, RolloutGroup
from grpo_run.core.runlog import get_logger
from grpo_run.core.scoring.metrics import ScoringMetrics
from grpo_run.core.scoring.scorer import RewardScorer

MAX_REFILL_ROUNDS = 8
"""Active sampling: draw at most this many extra rounds before training on what there is."""


@attrs.define
class _BatchClock:
    """Per-batch bookkeeping of one :meth:`RolloutProducer.produce` call (batches overlap)."""

    index: int
    tail_s: float = 0.0


class RolloutProducer:
    """Makes :class:`RolloutBatch` objects from a sampler, an engine and a scorer."""

    def __init__(
        self,
        sampler: Sampler,
        engine: GenerationEngine,
        scorer: RewardScorer,
        encoder: PromptEncoder,
        params: SamplingParams,
        num_prompts: int,
        seed: int | None = None,
    ) -> None:
        self.sampler = sampler
        self.engine = engine
        self.scorer = scorer
        self.encoder = encoder
        self.params = params
        self.num_prompts = num_prompts
        self.seed = seed
        """The run's seed: each round's sampling seed derives from it, the batch and the round
        (:mod:`.seeds`); ``None`` leaves seeding to the engine."""
        self.refill = isinstance(sampler, RefillingSampler) and bool(sampler.wants_nonzero_std)
        self.log = get_logger()
        self.phase_listener: Callable[[int, str], None] | None = None
        """Told ``(batch index, "generating" | "scoring")`` as a batch moves on (the live page)."""

    def rollout_state(self) -> dict[str, Any]:
        """What decides the next rollout batches: the sampler's state and, if they keep one, the
        engine's and the scorer's (rescalers' running statistics) -- a snapshot (deep copy): the
        live objects keep moving."""
        state: dict[str, Any] = {"sampler": self.sampler.state_dict()}
        if isinstance(self.engine, Stateful):
            state["engine"] = self.engine.state_dict()
        scoring = self.scorer.state_dict()
        if scoring:
            state["scorer"] = scoring
        return copy.deepcopy(state)

    def load_rollout_state(self, state: Mapping[str, Any]) -> None:
        """Undo :meth:`rollout_state` (resuming)."""
        self.sampler.load_state_dict(state["sampler"])
        if "engine" in state and isinstance(self.engine, Stateful):
            self.engine.load_state_dict(state["engine"])
        if "scorer" in state:
            self.scorer.load_state_dict(state["scorer"])

    async def produce(self, index: int) -> RolloutBatch:
        """Generate and score batch ``index``."""
        start = time.perf_counter()
        stats = ScoringMetrics()
        clock = _BatchClock(index)
        groups = await self._round(self.sampler.sample(self.num_prompts), stats, clock, 0)
        if self.refill:
            groups = [g for g in groups if g.has_spread]
            rounds = 0
            while len(groups) < self.num_prompts and rounds < MAX_REFILL_ROUNDS:
                rounds += 1
                more = await self._round(self.sampler.sample(self.num_prompts - len(groups)), stats, clock, rounds)
                groups.extend(g for g in more if g.has_spread)
            if len(groups) < self.num_prompts:
                self.log.warning("active_sampling_short_batch", step=index, groups=len(groups), rounds=rounds)
        return RolloutBatch(index, groups, time.perf_counter() - start, stats.report(), clock.tail_s)

    def _phase(self, clock: _BatchClock, phase: str) -> None:
        if self.phase_listener is not None:
            self.phase_listener(clock.index, phase)

    async def _round(
        self, rows: Sequence[Mapping[str, Any]], stats: ScoringMetrics, clock: _BatchClock, round_: int
    ) -> list[RolloutGroup]:
        """Generate and score one group per row; groups come back in row order.

        Groups are scored in batches: every group that has arrived while the previous scorer call
        ran goes into the next call, so a streaming engine's groups are scored while the rest
        generate, yet a call that returns many groups at once costs one scorer round trip (large
        worker chunks), not one per group. ``clock.tail_s`` gains the scoring left after the last
        group arrived.
        """
        prompt_ids = [self.encoder.encode(r) for r in rows]
        self._phase(clock, "generating")
        arrived: asyncio.Queue = asyncio.Queue()
        params = self.params
        if self.seed is not None:
            params = attrs.evolve(params, seed=train_seed(self.seed, clock.index, round_))
        feeder = asyncio.create_task(self._generate_into(arrived, prompt_ids, rows, clock, params))
        groups: dict[int, RolloutGroup] = {}
        generated: float | None = None
        try:
            done = False
            while not done:
                ready = [await arrived.get()]
                while not arrived.empty():
                    ready.append(arrived.get_nowait())
                done = ready[-1] is None
                ready = [item for item in ready if item is not None]
                if done:
                    generated = time.perf_counter()
                    self._phase(clock, "scoring")
                if ready:
                    scored, call_stats = await self._score_groups(rows, prompt_ids, ready)
                    stats.merge(call_stats)
                    groups.update(scored)
            await feeder  # re-raise a generation error
            if generated is not None:
                clock.tail_s += time.perf_counter() - generated
            return [groups[i] for i in sorted(groups)]
        finally:
            if not feeder.done():
                feeder.cancel()
                await asyncio.gather(feeder, return_exceptions=True)

    async def _generate_into(
        self, arrived: asyncio.Queue, prompt_ids: list[list[int]], rows: Sequence[Mapping[str, Any]], clock: _BatchClock,
        params: SamplingParams,
    ) -> None:
        """Put ``(prompt_index, completions)`` on ``arrived`` as groups finish, then ``None``
        (``rows`` and ``clock``: for producers that generate otherwise, such as episodes; ``params``
        carry this round's sampling seed)."""
        try:
            if isinstance(self.engine, StreamingEngine):
                async for i, comps in self.engine.generate_stream(prompt_ids, params):
                    arrived.put_nowait((i, comps))
            else:
                for i, comps in enumerate(await self.engine.generate(prompt_ids, params)):
                    arrived.put_nowait((i, comps))
        finally:
            arrived.put_nowait(None)  # also after an error: the consumer stops and awaits us

    async def _score_groups(
        self,
        rows: Sequence[Mapping[str, Any]],
        prompt_ids: list[list[int]],
        ready: list[tuple[int, Sequence[Completion]]],
    ) -> tuple[dict[int, RolloutGroup], ScoringMetrics]:
        """Score the completions of several groups in one scorer call."""
        flat = [(rows[i], c) for i, comps in ready for c in comps]
        scored = await self.scorer.score(
            [row for row, _ in flat], [c.text for _, c in flat],
            finish_reasons=[c.finish_reason for _, c in flat], num_tokens=[len(c.token_ids) for _, c in flat],
        )
        groups: dict[int, RolloutGroup] = {}
        offset = 0
        for i, comps in ready:
            mine = scored[offset : offset + len(comps)]
            offset += len(comps)
            row = rows[i]
            group = RolloutGroup(
                row=row,
                prompt_ids=prompt_ids[i],
                completions=list(comps),
                rewards=[s.reward for s in mine],
                max_reward=max((s.max_reward for s in mine), default=0.0),
                scores=[dict(s.scores) for s in mine],
                solved=[s.solved for s in mine],
            )
            if isinstance(self.sampler, RewardFeedbackSampler):
                self.sampler.update(str(row["id"]), group.rewards, group.solved)
            groups[i] = group
        return groups, scored.stats
