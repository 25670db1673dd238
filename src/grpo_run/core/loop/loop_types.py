"""What the training loop (:mod:`.scheduler`) works with: the small surfaces of its
collaborators (tests drive it with fakes; a learner may live in another process), its settings
and the state its stages share."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import attrs

from grpo_run.core.config.schema import AlgorithmSection
from grpo_run.core.plugins.adapters import LoraAdapter
from grpo_run.core.rollout.packing import SequenceToPack
from grpo_run.core.rollout.sequences import RolloutBatch


class BatchSource(Protocol):
    """Makes rollout batches (:class:`~grpo_run.core.rollout.producer.RolloutProducer`)."""

    async def produce(self, index: int) -> RolloutBatch: ...

    def rollout_state(self) -> dict[str, Any]: ...


class LearnerLike(Protocol):
    """What the loop asks of a learner (:class:`~grpo_run.core.learner.learner.Learner`)."""

    def train_step(self, seqs: Sequence[SequenceToPack]) -> dict[str, float]: ...

    def skip_step(self) -> None: ...

    def weights_snapshot(self) -> Mapping[str, Any] | LoraAdapter: ...


class WeightSink(Protocol):
    """Receives new weights (the generation engine): full weights, or with ``model.lora.sync =
    "adapter"`` the LoRA adapter (:mod:`.weight_sync` calls the one that fits the snapshot)."""

    async def update_weights(self, state_dict: Mapping[str, Any], version: int) -> None: ...

    async def update_adapter(self, adapter: LoraAdapter, version: int) -> None: ...


class EvaluatorLike(Protocol):
    async def evaluate(self, step: int) -> dict[str, float]: ...


@attrs.frozen
class LoopSettings:
    """The loop's own settings, taken from the run config."""

    total_steps: int
    async_steps: int = 1
    local_eval_every: int = 0
    stop_at_eval_accuracy: float = 0.0
    max_runtime_s: float = 0.0
    save_freq: int = 0
    """Steps after which a checkpoint is due (informational: the loop snapshots the rollout
    state before every batch, since an interrupt may need it after any step)."""
    algorithm: AlgorithmSection = attrs.Factory(AlgorithmSection)


@attrs.define
class LoopParts:
    producer: BatchSource
    learner: LearnerLike
    engine: WeightSink
    evaluator: EvaluatorLike | None = None


@attrs.define
class LoopState:
    """Shared between the stages; only the learner stage mutates ``version`` and ``snapshot``."""

    version: int = 0
    """Learner steps completed (the version of the newest weights)."""
    snapshot: Mapping[str, Any] | LoraAdapter | None = None
    engine_version: int = 0
    stopping: bool = False
    stop_reason: str = ""
    last_eval_step: int = -1
    started: float = attrs.Factory(time.perf_counter)
    cut_short: tuple[str, ...] = ()
    """What ``train.max_runtime_s`` abandoned when it ran out (``"evaluation"``, ``"generation"``)."""
