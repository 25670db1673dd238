"""The ``uniform`` sampler: shuffled passes over the prompt rows."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

import attrs


@attrs.frozen
class UniformSamplerConfig:
    """Options of the ``uniform`` sampler."""

    shuffle: bool = True
    """Reshuffle the rows at the start of every epoch (pass over the data)."""


class UniformSampler:
    """Draws rows without replacement within an epoch; every row once per epoch."""

    name = "uniform"
    Config = UniformSamplerConfig

    def __init__(self, config: UniformSamplerConfig, rows: Sequence[Mapping[str, Any]], seed: int) -> None:
        if not rows:
            raise ValueError("the uniform sampler needs at least one row")
        self.config = config
        self.rows = rows
        self.seed = seed
        self.epoch = 0
        self.position = 0
        self._order = self._epoch_order()

    def _epoch_order(self) -> list[int]:
        order = list(range(len(self.rows)))
        if self.config.shuffle:
            random.Random(self.seed * 7919 + self.epoch).shuffle(order)
        return order

    def sample(self, n: int) -> list[Mapping[str, Any]]:
        out = []
        while len(out) < n:
            if self.position == len(self._order):
                self.epoch += 1
                self.position = 0
                self._order = self._epoch_order()
            out.append(self.rows[self._order[self.position]])
            self.position += 1
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.epoch = int(state["epoch"])
        self.position = int(state["position"])
        self._order = self._epoch_order()
