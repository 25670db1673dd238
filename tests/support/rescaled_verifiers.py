"""Verifiers for the scoring runtime's rescaling and own-worker tests (module level: worker
processes import them)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import attrs

from grpo_run import VerifierConfig, VerifierResult


class Doubler:
    """A :class:`~grpo_run.ScoreRescaler`: score = 2 x raw + the number of calls it has seen in training
    (its state); "boom" as a raw score of 13 raises."""

    def __init__(self) -> None:
        self.calls = 0
        self.seen: list[tuple[list[float], bool]] = []

    def rescale(self, raw: Sequence[float], training: bool) -> list[float]:
        self.seen.append((list(raw), training))
        if 13.0 in raw:
            raise ValueError("unlucky")
        scores = [2 * r + self.calls for r in raw]
        self.calls += int(training)
        return scores

    def state_dict(self) -> dict[str, Any]:
        return {"calls": self.calls}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.calls = int(state["calls"])


@attrs.frozen
class RawConfig(VerifierConfig):
    """Rescaled by a :class:`Doubler` into ``[-100, 100]``; a worker of its own when ``own``."""

    own: bool = False
    batch: int = 64
    score_range: tuple[float, float] = (-100.0, 100.0)

    def rescaler(self) -> Doubler:
        return Doubler()

    @property
    def max_batch_size(self) -> int:
        return self.batch


@attrs.frozen
class OwnRawConfig(RawConfig):
    @property
    def worker_resources(self) -> dict[str, float]:
        return {"num_cpus": 1.0}


class RawNumber:
    """Batched: the raw score is the completion read as a number; metrics: the pid that scored
    it and the size of the batch it came in."""

    name: ClassVar[str] = "raw-number"
    Config: ClassVar[type] = RawConfig

    def __init__(self, config: RawConfig) -> None:
        self.config = config

    def score_batch(self, items: Sequence[tuple[str, Any, Mapping[str, Any]]]) -> list[VerifierResult]:
        return [VerifierResult(float(c), metrics={"pid": float(os.getpid()), "batch": float(len(items))})
                for c, _, _ in items]


class Pid:
    """Scores 0 with the pid of the process that scored it."""

    name: ClassVar[str] = "pid"
    Config: ClassVar[type] = VerifierConfig

    def __init__(self, config: VerifierConfig) -> None:
        self.config = config

    def score(self, completion: str, ground_truth: object, row: object) -> VerifierResult:
        return VerifierResult(0.0, metrics={"pid": float(os.getpid())})


@attrs.frozen
class FollowsRunConfig(VerifierConfig):
    """``dtype = "auto"`` follows the run's ``model.dtype``; ``fail`` makes ``with_run`` raise."""

    dtype: str = "auto"
    fail: bool = False

    def with_run(self, run: Any) -> FollowsRunConfig:
        if self.fail:
            raise RuntimeError("no defaults today")
        return attrs.evolve(self, dtype=run.model.dtype) if self.dtype == "auto" else self

    def check_run(self, run: Any) -> list[Any]:
        from grpo_run import ConfigIssue

        return [] if self.dtype != "auto" or self.fail else [ConfigIssue("x", "with_run came too late")]


class FollowsRun(Pid):
    name: ClassVar[str] = "follows-run"
    Config: ClassVar[type] = FollowsRunConfig
