"""How the ``hf`` engine cuts requests into sampling calls, one request or several at once.

A request alone is cut into chunks of at most ``max_batch_size`` sequences (:func:`sample_chunks`),
each a sampling call whose random numbers come from a generator seeded by the request's seed and
the chunk's first prompt and sample (:func:`chunk_seed`): what is drawn depends on what is asked,
not on how many calls came before. Several requests at once (a sweep's variants,
:class:`~grpo_run.BatchesRequests`) keep exactly those chunks -- :class:`Segment` -- and put chunks
of different requests side by side in one call (:func:`pack`) when their sampling settings match,
each drawing from its own generator: a request's completions are the ones it gets alone, up to
floating-point reordering in the larger batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from grpo_run import SamplingParams

if TYPE_CHECKING:
    import torch


@attrs.frozen
class Segment:
    """One chunk of one request: the samples of a sampling call it would make alone."""

    request: int
    """Index of the request in the batch."""
    chunk: tuple[tuple[int, int], ...]
    """``(prompt index in the request, copies)``, in prompt order."""
    generator: Any = attrs.field(eq=False)
    """The ``torch.Generator`` its rows draw from (shared by the chunks of an unseeded request,
    which draw one after the other)."""
    adapter: str | None
    """The LoRA adapter its rows use (``None``: the base model)."""

    @property
    def rows(self) -> int:
        return sum(k for _, k in self.chunk)


def decode_settings(params: SamplingParams) -> tuple[Any, ...]:
    """What must be equal for two requests to share a sampling call (not ``n``, the seed or the adapter)."""
    return (params.max_new_tokens, params.greedy, params.temperature, params.top_p, params.stop_strings)


def request_segments(request: int, num_prompts: int, params: SamplingParams, max_batch_size: int,
                     generator: Callable[[int | None], torch.Generator], adapter: str | None,
                     first_prompt: int = 0) -> list[Segment]:
    """The chunks of a request of ``num_prompts`` prompts (the request's prompts are number
    ``first_prompt`` onwards of what was asked), each with its generator: ``generator(seed)``
    makes one seeded so (``None``: the one generator of an unseeded request)."""
    out, taken, shared = [], [0] * num_prompts, None
    for chunk in sample_chunks(num_prompts, params.n, max_batch_size):
        first, _ = chunk[0]
        if params.seed is not None:
            made = generator(chunk_seed(params.seed, first_prompt + first, taken[first]))
        else:
            shared = made = shared if shared is not None else generator(None)
        out.append(Segment(request, tuple(chunk), made, adapter))
        for i, k in chunk:
            taken[i] += k
    return out


def pack(segments: Sequence[Segment], max_batch_size: int, mixes: Callable[[set[str | None]], bool]) -> list[list[Segment]]:
    """Consecutive segments into sampling calls of at most ``max_batch_size`` rows. A call holds
    at most one chunk of each request (a request alone makes one call per chunk), and adapters
    only where ``mixes(adapters)`` says one forward can serve them together."""
    calls: list[list[Segment]] = []
    for segment in segments:
        current = calls[-1] if calls else None
        if (current is not None and sum(s.rows for s in current) + segment.rows <= max_batch_size
                and all(s.request != segment.request for s in current)
                and mixes({s.adapter for s in current} | {segment.adapter})):
            current.append(segment)
        else:
            calls.append([segment])
    return calls


def sample_chunks(num_prompts: int, n: int, max_batch_size: int) -> list[list[tuple[int, int]]]:
    """Split ``n`` samples of each prompt into sampling calls of at most ``max_batch_size``
    sequences: per call, ``(prompt_index, copies)`` in prompt order. A prompt's samples stay in one
    call when they fit (so its prompt is prefilled once)."""
    chunks: list[list[tuple[int, int]]] = []
    current: list[tuple[int, int]] = []
    filled = 0
    for i in range(num_prompts):
        left = n
        while left:
            if filled == max_batch_size or (filled and filled + left > max_batch_size and left <= max_batch_size):
                chunks.append(current)
                current, filled = [], 0
            take = min(left, max_batch_size - filled)
            current.append((i, take))
            filled += take
            left -= take
    if current:
        chunks.append(current)
    return chunks


def chunk_seed(seed: int, prompt: int, sample: int) -> int:
    """The torch seed of a sampling call whose first sequence is sample ``sample`` of prompt
    ``prompt`` of a request seeded ``seed``: a pure function of the three."""
    import numpy as np

    mixed = np.random.SeedSequence([seed % (1 << 64), prompt, sample]).generate_state(1, np.uint32)[0]
    return int(mixed)
