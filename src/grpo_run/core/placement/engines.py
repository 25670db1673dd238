"""Data-parallel generation: ``engine.num_engines`` engines behind one engine-shaped object.

:class:`EnginePool` splits each request's prompts into contiguous, nearly equal chunks, one per
engine, generates them concurrently and returns the groups in prompt order; it streams each
engine's groups as they come (every engine's own streaming when it has it). Weight updates (full
weights, or a LoRA run's adapter) go to every engine. The engines are any registered
:class:`~grpo_run.GenerationEngine` built from ``(class, config, EngineContext)`` -- objects in
this process or proxies of Ray actors (:mod:`grpo_run.core.placement.ray_actors`); each gets its
own sampling seed, and a seeded request gives each engine's share a seed of its own
(:mod:`grpo_run.core.rollout.seeds`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import attrs

from grpo_run.core.errors import UserError
from grpo_run.core.plugins.abilities import Stateful, StreamingEngine
from grpo_run.core.plugins.adapters import LoraAdapter
from grpo_run.core.plugins.types import Completion, EngineContext, SamplingParams
from grpo_run.core.rollout.seeds import chunk_seed

SEED_STRIDE = 1_000_003
"""Engine ``i`` samples with seed ``context.seed + i * SEED_STRIDE``: distinct streams, and engine 0
keeps the run's seed."""


def engine_contexts(context: EngineContext, num_engines: int) -> list[EngineContext]:
    return [attrs.evolve(context, seed=context.seed + i * SEED_STRIDE) for i in range(num_engines)]


def split_evenly(count: int, parts: int) -> list[tuple[int, int]]:
    """``(start, end)`` of ``parts`` contiguous chunks of ``range(count)``, sizes differing by at most 1."""
    base, extra = divmod(count, parts)
    bounds, start = [], 0
    for i in range(parts):
        end = start + base + (1 if i < extra else 0)
        bounds.append((start, end))
        start = end
    return bounds


def _share(params: SamplingParams, start: int) -> SamplingParams:
    """The params of the engine whose share of a request starts at prompt ``start``: its own seed,
    a function of the request's seed and ``start`` (unseeded requests stay unseeded)."""
    return params if params.seed is None else attrs.evolve(params, seed=chunk_seed(params.seed, start))


class EnginePool:
    """Several engines that look like one (see the module docstring)."""

    name = "pool"

    def __init__(self, engines: Sequence[Any]) -> None:
        if not engines:
            raise ValueError("an engine pool needs at least one engine")
        self.engines = list(engines)
        self.continuous_batching = all(getattr(e, "continuous_batching", False) for e in self.engines)
        """Every engine batches requests itself: callers may send requests one by one."""
        self._turn = 0

    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Completion]]:
        if len(prompts) == 1 and len(self.engines) > 1:  # single requests (episode turns) take turns
            self._turn += 1
            return await self.engines[self._turn % len(self.engines)].generate(prompts, _share(params, 0))
        chunks = [(s, e) for s, e in split_evenly(len(prompts), len(self.engines)) if e > s]
        results = await asyncio.gather(*(self.engines[i].generate(prompts[s:e], _share(params, s))
                                         for i, (s, e) in enumerate(chunks)))
        return [group for chunk in results for group in chunk]

    async def generate_stream(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> AsyncIterator[tuple[int, list[Completion]]]:
        """Every engine's groups as they finish, with indices into ``prompts``."""
        queue: asyncio.Queue = asyncio.Queue()
        chunks = [(s, e) for s, e in split_evenly(len(prompts), len(self.engines)) if e > s]
        tasks = [asyncio.create_task(self._feed(self.engines[i], prompts[s:e], s, _share(params, s), queue))
                 for i, (s, e) in enumerate(chunks)]
        try:
            for _ in range(len(prompts)):
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    @staticmethod
    async def _feed(engine: Any, prompts: Sequence[Sequence[int]], offset: int, params: SamplingParams,
                    queue: asyncio.Queue) -> None:
        try:
            if isinstance(engine, StreamingEngine):
                async for i, group in engine.generate_stream(prompts, params):
                    queue.put_nowait((offset + i, group))
            else:
                for i, group in enumerate(await engine.generate(prompts, params)):
                    queue.put_nowait((offset + i, group))
        except BaseException as exc:  # hand it to the consumer, which raises it
            queue.put_nowait(exc)
            raise

    async def update_weights(self, state_dict: Mapping[str, Any], version: int) -> None:
        await asyncio.gather(*(engine.update_weights(state_dict, version) for engine in self.engines))

    async def update_adapter(self, adapter: LoraAdapter, version: int) -> None:
        await asyncio.gather(*(engine.update_adapter(adapter, version) for engine in self.engines))

    def state_dict(self) -> dict[str, Any]:
        """Each stateful engine's state (their sampling-seed counters), for checkpoints."""
        return {"engines": [e.state_dict() if isinstance(e, Stateful) else None for e in self.engines]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        saved = state.get("engines")
        if saved is None or len(saved) != len(self.engines):
            had = 1 if saved is None else len(saved)
            raise UserError(
                f"the checkpoint holds the state of {had} engine(s) and engine.num_engines = {len(self.engines)}: "
                "resume with the number of engines it was saved with"
            )
        for engine, engine_state in zip(self.engines, saved):
            if engine_state is not None and isinstance(engine, Stateful):
                engine.load_state_dict(engine_state)

    def close(self) -> None:
        for engine in self.engines:
            engine.close()
