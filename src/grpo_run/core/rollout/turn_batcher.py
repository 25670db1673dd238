"""Coalesces the pending turns of concurrent episodes into one engine call.

An episode waits for the engine or for its environment. The batcher knows how many episodes are
running; when every one of them is waiting for a turn, it sends all those turns in one
``generate`` call (one call per distinct sampling setting). The batch is therefore the same
whatever the timing of environment steps, and so is its sampling seed, derived from the
``(group seed, sample, turn)`` keys of its members: a resumed run draws the same turns.

An engine that batches requests itself (``continuous_batching = True``, as vLLM does) gets each
turn as its own request the moment it is asked for, seeded by its own key alone: episodes then
interleave inside the engine, and no episode waits for another's environment step.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import attrs

from grpo_run.core.plugins.contracts import GenerationEngine
from grpo_run.core.plugins.types import Completion, SamplingParams
from grpo_run.core.rollout.episodes import derive_seed


class TurnBatcher:
    """Lockstep turns: ``async with batcher.episode(): ... await batcher.generate(key, ids, params)``."""

    def __init__(self, engine: GenerationEngine) -> None:
        self.engine = engine
        self.active = 0
        self._pending: list[tuple[tuple[Any, ...], list[int], SamplingParams, asyncio.Future]] = []
        self._tasks: set[asyncio.Task] = set()
        self.calls = 0
        """Engine calls made (metrics)."""
        self.per_request = bool(getattr(engine, "continuous_batching", False))
        """Each turn its own engine call (the engine interleaves them)."""

    def enter(self) -> None:
        self.active += 1

    def leave(self) -> None:
        self.active -= 1
        self._maybe_flush()

    async def generate(self, key: tuple[Any, ...], prompt: Sequence[int], params: SamplingParams) -> Completion:
        """One turn of the episode ``key`` (its sampling seed is ignored: the batch's, or with a
        continuously batching engine the key's own, is used)."""
        if self.per_request:
            self.calls += 1
            results = await self.engine.generate([list(prompt)], attrs.evolve(params, n=1, seed=derive_seed(*key)))
            if len(results) != 1 or len(results[0]) != 1:
                raise RuntimeError(f"the engine returned {len(results)} groups for 1 prompt (n = 1)")
            return results[0][0]
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._pending.append((key, list(prompt), params, future))
        self._maybe_flush()
        return await future

    def _maybe_flush(self) -> None:
        if not self._pending or len(self._pending) < self.active:
            return
        batch = sorted(self._pending, key=lambda item: item[0])
        self._pending = []
        by_params: dict[SamplingParams, list] = {}
        for item in batch:
            by_params.setdefault(attrs.evolve(item[2], seed=None, n=1), []).append(item)
        for params, items in by_params.items():
            task = asyncio.get_running_loop().create_task(self._run(params, items))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, params: SamplingParams, items: list) -> None:
        seeded = attrs.evolve(params, seed=derive_seed(*(k for item in items for k in item[0])))
        self.calls += 1
        try:
            results = await self.engine.generate([item[1] for item in items], seeded)
            if len(results) != len(items) or any(len(r) != 1 for r in results):
                raise RuntimeError(f"the engine returned {len(results)} groups for {len(items)} prompts (n = 1)")
        except BaseException as exc:
            for item in items:
                if not item[3].done():
                    item[3].set_exception(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        for item, result in zip(items, results):
            if not item[3].done():
                item[3].set_result(result[0])
