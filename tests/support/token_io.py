"""Token-in/token-out checks of recorded episodes: every sampled turn sits after exactly the ids
the engine sampled it after, and every turn the engine sampled is recorded once."""

from __future__ import annotations

import asyncio
from typing import Any


class RecordingEngine:
    """Wraps an engine; ``records`` holds ``(prompt ids, sampled ids)`` of every completion.
    ``delay_s``: each call takes that long (so that concurrent requests overlap)."""

    def __init__(self, engine: Any, delay_s: float = 0.0) -> None:
        self.engine = engine
        self.delay_s = delay_s
        self.records: list[tuple[tuple[int, ...], tuple[int, ...]]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)

    async def generate(self, prompts, params):
        await asyncio.sleep(self.delay_s)
        out = await self.engine.generate(prompts, params)
        for prompt, group in zip(prompts, out):
            self.records.extend((tuple(prompt), tuple(c.token_ids)) for c in group)
        return out


def sampled_turns(episode: Any) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """``(ids before it, its ids)`` of each sampled turn as the episode recorded it."""
    out = []
    for seg in episode.segments:
        full = list(seg.prompt_ids) + list(seg.completion_ids)
        start = len(seg.prompt_ids)
        j = 0
        while j < len(seg.completion_ids):
            if not seg.sampled[j]:
                j += 1
                continue
            k = j
            while k < len(seg.completion_ids) and seg.sampled[k] and seg.turns[k] == seg.turns[j]:
                k += 1
            out.append((tuple(full[: start + j]), tuple(full[start + j: start + k])))
            j = k
    return out


def assert_token_in_token_out(episode: Any, records: list[tuple[tuple[int, ...], tuple[int, ...]]]) -> None:
    recorded = sampled_turns(episode)
    for before, ids in recorded:
        assert (before, ids) in records, f"turn {ids} is recorded after ids it was not sampled after: {before}"
    assert sorted(recorded) == sorted(records), "a sampled turn is missing from the episode, or recorded twice"
