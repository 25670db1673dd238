"""The ``uniform`` sampler: shuffled passes over the prompt rows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from grpo_run.plugins.samplers.common import ShuffledEpochs


@attrs.frozen
class UniformSamplerConfig:
    """Options of the ``uniform`` sampler."""

    shuffle: bool = True
    """Reshuffle the rows at the start of every epoch (pass over the data)."""


class UniformSampler:
    """Draws rows without replacement within an epoch; every row once per epoch.

    The order is :class:`ShuffledEpochs`' for ``seed``; the state is its ``{"epoch", "position"}``.
    """

    name = "uniform"
    Config = UniformSamplerConfig

    def __init__(self, config: UniformSamplerConfig, rows: Sequence[Mapping[str, Any]], seed: int) -> None:
        if not rows:
            raise ValueError("the uniform sampler needs at least one row")
        self.config = config
        self.rows = rows
        self.cursor = ShuffledEpochs(len(rows), seed, config.shuffle)

    def sample(self, n: int) -> list[Mapping[str, Any]]:
        return [self.rows[self.cursor.next()] for _ in range(n)]

    def state_dict(self) -> dict[str, Any]:
        return self.cursor.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.cursor.load_state_dict(state)
