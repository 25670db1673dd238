"""Producing one rollout batch: sample prompts, generate, score each group as it completes.

Engines that can stream (``generate_stream``, yielding ``(prompt_index, completions)`` as groups
finish) get every group scored while the rest are still generating; others are scored when
their ``generate`` call returns. Samplers with ``wants_nonzero_std = True`` (active sampling)
get more prompts drawn until the batch holds enough groups with a reward spread.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

from grpo_run.core.plugins.contracts import Completion, SamplingParams
from grpo_run.core.rollout.sequences import RolloutBatch, RolloutGroup
from grpo_run.core.runlog import get_logger
from grpo_run.core.loop.build import RunParts

MAX_REFILL_ROUNDS = 8
"""Active sampling: draw at most this many extra rounds before training on what there is."""


class RolloutProducer:
    """Makes :class:`RolloutBatch` objects from the run's sampler, engine and scorer."""

    def __init__(self, parts: RunParts) -> None:
        self.parts = parts
        cfg = parts.cfg
        self.params = SamplingParams(
            n=cfg.rollout.num_samples_per_prompt_rollout,
            max_new_tokens=cfg.rollout.response_length,
            temperature=cfg.rollout.temperature,
            top_p=cfg.rollout.top_p,
            stop_strings=tuple(cfg.rollout.stop_strings),
        )
        self.num_prompts = cfg.rollout.num_unique_prompts_rollout
        self.refill = bool(getattr(parts.sampler, "wants_nonzero_std", False))
        self.log = get_logger()

    async def produce(self, index: int) -> RolloutBatch:
        """Generate and score batch ``index``."""
        start = time.perf_counter()
        groups = await self._round(self.parts.sampler.sample(self.num_prompts))
        generation_s = time.perf_counter() - start
        if self.refill:
            groups = [g for g in groups if _has_spread(g)]
            rounds = 0
            while len(groups) < self.num_prompts and rounds < MAX_REFILL_ROUNDS:
                rounds += 1
                more = await self._round(self.parts.sampler.sample(self.num_prompts - len(groups)))
                groups.extend(g for g in more if _has_spread(g))
            if len(groups) < self.num_prompts:
                self.log.warning("active_sampling_short_batch", step=index, groups=len(groups), rounds=rounds)
            generation_s = time.perf_counter() - start
        return RolloutBatch(index, groups, generation_s, self.parts.scorer.pop_metrics())

    async def _round(self, rows: Sequence[Mapping[str, Any]]) -> list[RolloutGroup]:
        prompt_ids = [self.parts.encoder.encode(r) for r in rows]
        engine = self.parts.engine
        tasks: dict[int, asyncio.Task] = {}
        stream = getattr(engine, "generate_stream", None)
        try:
            if stream is not None:
                async for i, comps in stream(prompt_ids, self.params):
                    tasks[i] = asyncio.create_task(self._score_group(rows[i], prompt_ids[i], comps))
            else:
                all_comps = await engine.generate(prompt_ids, self.params)
                for i, comps in enumerate(all_comps):
                    tasks[i] = asyncio.create_task(self._score_group(rows[i], prompt_ids[i], comps))
            # Prompt order, whatever order the groups finished in.
            return list(await asyncio.gather(*(tasks[i] for i in sorted(tasks))))
        except BaseException:
            for task in tasks.values():
                task.cancel()
            raise

    async def _score_group(self, row: Mapping[str, Any], prompt_ids: list[int], comps: Sequence[Completion]) -> RolloutGroup:
        scored = await self.parts.scorer.score(
            [row] * len(comps), [c.text for c in comps], finish_reasons=[c.finish_reason for c in comps],
            num_tokens=[len(c.token_ids) for c in comps],
        )
        group = RolloutGroup(
            row=row,
            prompt_ids=prompt_ids,
            completions=list(comps),
            rewards=[s.reward for s in scored],
            max_reward=max((s.max_reward for s in scored), default=0.0),
        )
        update = getattr(self.parts.sampler, "update", None)
        if update is not None:
            update(str(row["id"]), group.rewards, group.max_reward)
        return group


def _has_spread(group: RolloutGroup) -> bool:
    return max(group.rewards) - min(group.rewards) > 1e-12
