"""Shuffled passes over a list of indices, with a position that can be saved and restored."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any


class ShuffledEpochs:
    """Yields ``0..size-1`` in a fresh order each epoch; the order depends only on ``seed`` and the epoch.

    Because an epoch's order is recomputed from ``(seed, epoch)``, the state is two integers and
    a restored cursor continues exactly where the saved one stopped. The permutation is the one
    the ``uniform`` sampler uses for the same seed.
    """

    def __init__(self, size: int, seed: int, shuffle: bool = True) -> None:
        if size <= 0:
            raise ValueError("ShuffledEpochs needs at least one item")
        self.size = size
        self.seed = seed
        self.shuffle = shuffle
        self.epoch = 0
        self.position = 0
        self._order = self._epoch_order()

    def _epoch_order(self) -> list[int]:
        order = list(range(self.size))
        if self.shuffle:
            random.Random(self.seed * 7919 + self.epoch).shuffle(order)
        return order

    def next(self) -> int:
        """The next index, starting a new epoch when the current one is used up."""
        if self.position == self.size:
            self.epoch += 1
            self.position = 0
            self._order = self._epoch_order()
        index = self._order[self.position]
        self.position += 1
        return index

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        epoch, position = int(state["epoch"]), int(state["position"])
        if epoch < 0 or not 0 <= position <= self.size:
            raise ValueError(f"sampler state out of range: epoch {epoch}, position {position} of {self.size}")
        self.epoch, self.position = epoch, position
        self._order = self._epoch_order()
