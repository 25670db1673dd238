"""Handing the learner's newest weights to the engines: full weights through ``update_weights``,
a LoRA adapter through ``update_adapter`` (:class:`~grpo_run.TakesAdapters`). The training loop,
a resume and ``grpo-run eval`` push them the same way."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from grpo_run.core.errors import RunError
from grpo_run.core.plugins.adapters import LoraAdapter, tensors_nbytes


async def push_snapshot(engine: Any, snapshot: Mapping[str, Any] | LoraAdapter, version: int) -> int:
    """Load ``snapshot`` (a learner's :meth:`weights_snapshot`) into ``engine`` as policy
    ``version``; returns the bytes each engine was handed (``perf/weight_sync_bytes``). Any
    failure is a :class:`RunError` naming the engine and the step."""
    try:
        if isinstance(snapshot, LoraAdapter):
            await engine.update_adapter(snapshot, version)
            return snapshot.nbytes
        await engine.update_weights(snapshot, version)
        return tensors_nbytes(snapshot)
    except RunError:
        raise  # says what failed already
    except Exception as exc:  # any engine: the run ends with the engine and the step named
        name = getattr(engine, "name", type(engine).__name__)
        raise RunError(f"engine {name!r}: weight sync for step {version} failed: {type(exc).__name__}: {exc}") from exc
