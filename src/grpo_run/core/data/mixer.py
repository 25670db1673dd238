"""The dataset mixer: how many rows each source contributes (Open Instruct's ``dataset_mixer_list``).

A source contributes ``round(weight x len)`` rows, or exactly ``rows``. Fewer than it has: a
sample without replacement. More: every row as many whole times as fit, then a sample of the
rest. The sample depends only on ``data.seed`` and the source's position in its list, and rows keep
their source order, so the same config always gives the same rows.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def target_count(available: int, weight: float | None, rows: int | None) -> int:
    """Rows a source with ``available`` rows contributes."""
    if rows is not None:
        return rows
    return round((1.0 if weight is None else weight) * available)


def take_rows(items: Sequence[T], count: int, seed: int, position: int) -> list[T]:
    """``count`` of ``items``: whole copies, then a seeded sample of the remainder, in source order."""
    if count == len(items):
        return list(items)
    copies, rest = divmod(count, len(items)) if items else (0, 0)
    rng = random.Random(seed * 1_000_003 + position)
    picked = sorted(rng.sample(range(len(items)), rest))
    return [item for _ in range(copies) for item in items] + [items[i] for i in picked]
