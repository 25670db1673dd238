"""The engine side of a sweep: one engine serving every variant, each through a view of its own.

A variant's view (:class:`VariantEngine`) is what its run sees as its engine: it tags every request
with the variant's adapter (``SamplingParams.adapter``) and hands the variant's adapter to the
engine under that name, with the variant's own version. An engine that batches concurrent
requests itself (``continuous_batching``: vLLM) gets the variants' requests as they come; one
that samples one call at a time but can take several requests in one batch
(:class:`~grpo_run.BatchesRequests`: ``hf``) gets them gathered: a request waits until every
running variant has asked (a variant's generation, scoring and learner step follow the others'
by at most a learner step), then all go in one :meth:`generate_batch`. A variant that ends
(finished, failed, stopped) leaves, and no longer holds the others back.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import attrs

from grpo_run.core.errors import RunError
from grpo_run.core.placement.local import LocalPlacement
from grpo_run.core.plugins.abilities import BatchesRequests, Stateful, StreamingEngine
from grpo_run.core.plugins.adapters import AdapterSlots, LoraAdapter
from grpo_run.core.plugins.types import Completion, EngineContext, SamplingParams


@attrs.define
class _Request:
    variant: str
    prompts: Sequence[Sequence[int]]
    params: SamplingParams
    answer: asyncio.Future


class SharedEngine:
    """The sweep's one engine (built when the first variant asks for its own) and the gathering
    of its variants' requests."""

    def __init__(self, slots: AdapterSlots, variants: Sequence[str]) -> None:
        self.slots = slots
        self.engine: Any = None
        self.live = set(variants)
        """Variants whose loop runs (or will): a gathered batch waits for each of them."""
        self._pending: list[_Request] = []
        self._flushing = False

    def view(self, variant: str, cls: type, config: Any, context: EngineContext, num_engines: int) -> VariantEngine:
        """Variant ``variant``'s engine (the shared one built from this variant's context, with the
        sweep's adapter slots, on first ask)."""
        if self.engine is None:
            context = attrs.evolve(context, adapters=self.slots)
            self.engine = LocalPlacement().engines(cls, config, context, num_engines)
        streams = isinstance(self.engine, StreamingEngine) and not self.gathers
        return (StreamingVariantEngine if streams else VariantEngine)(self, variant)

    @property
    def gathers(self) -> bool:
        """Whether the variants' requests are gathered into batches (see the module docstring)."""
        return isinstance(self.engine, BatchesRequests) and not getattr(self.engine, "continuous_batching", False)

    async def generate(self, variant: str, prompts: Sequence[Sequence[int]],
                       params: SamplingParams) -> list[list[Completion]]:
        if not self.gathers:
            return await self.engine.generate(prompts, params)
        request = _Request(variant, prompts, params, asyncio.get_running_loop().create_future())
        self._pending.append(request)
        self._maybe_flush()
        try:
            return await request.answer
        finally:
            if request in self._pending:  # cancelled before its batch went (the variant stops)
                self._pending.remove(request)

    def leave(self, variant: str) -> None:
        """Variant ``variant`` will ask no more: the others no longer wait for it."""
        self.live.discard(variant)
        if self.gathers:
            self._maybe_flush()

    def _maybe_flush(self) -> None:
        asking = {r.variant for r in self._pending}
        if self._flushing or not self._pending or not (self.live <= asking):
            return
        batch, self._pending = self._pending, []
        self._flushing = True
        asyncio.get_running_loop().create_task(self._flush(batch), name="sweep-generate")

    async def _flush(self, batch: list[_Request]) -> None:
        try:
            results = await self.engine.generate_batch([(r.prompts, r.params) for r in batch])
        except BaseException as exc:  # every variant of the batch hears it
            for r in batch:
                if not r.answer.done():
                    r.answer.set_exception(exc if isinstance(exc, Exception) else RunError(f"generation stopped: {exc!r}"))
        else:
            for r, result in zip(batch, results):
                if not r.answer.done():
                    r.answer.set_result(result)
        finally:
            self._flushing = False
            self._maybe_flush()

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine = None


class VariantEngine:
    """A variant's view of the shared engine: its requests sample with its adapter, its syncs
    load its adapter (see the module docstring). Closing it leaves the shared engine running."""

    def __init__(self, shared: SharedEngine, adapter: str) -> None:
        self.shared = shared
        self.adapter = adapter
        self.name = getattr(shared.engine, "name", type(shared.engine).__name__)
        self.continuous_batching = getattr(shared.engine, "continuous_batching", False)

    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Completion]]:
        return await self.shared.generate(self.adapter, prompts, attrs.evolve(params, adapter=self.adapter))

    async def update_adapter(self, adapter: LoraAdapter, version: int) -> None:
        await self.shared.engine.update_adapter(attrs.evolve(adapter, name=self.adapter), version)

    async def update_weights(self, state_dict: Mapping[str, Any], version: int) -> None:
        raise RunError(f"the {self.name} engine of a sweep takes each variant's adapter, not full weights")

    def state_dict(self) -> dict[str, Any]:
        """The shared engine's state (its sampling-seed counter: the loop seeds every request, so
        the variants' draws do not depend on it), for a checkpoint a run can resume from."""
        engine = self.shared.engine
        return engine.state_dict() if isinstance(engine, Stateful) else {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        engine = self.shared.engine
        if state and isinstance(engine, Stateful):
            engine.load_state_dict(state)

    def close(self) -> None:
        self.shared.leave(self.adapter)


class StreamingVariantEngine(VariantEngine):
    """The view of an engine that streams each prompt's group as it finishes (and batches
    concurrent requests itself)."""

    def generate_stream(self, prompts: Sequence[Sequence[int]],
                        params: SamplingParams) -> AsyncIterator[tuple[int, list[Completion]]]:
        return self.shared.engine.generate_stream(prompts, attrs.evolve(params, adapter=self.adapter))
