"""Saying what a quiet run is waiting for.

A run can sit for minutes with nothing to show: a slow or hung verifier, an engine loading
weights, a long learner step. When the loop's stages (as :class:`~.pipeline.PipelineMonitor`
keeps them) have not moved for ``logging.report_waits_s`` seconds, :class:`WaitReporter` prints
one line naming what is in progress and for how long, and again every ``report_waits_s`` while
nothing moves: ``still waiting (30 s without progress): batch 3 scoring for 31 s``. With an
environment, the line also says what its calls are doing (``environment 'x': 4 call(s) running,
the longest step for 95 s, 2 hung call(s) abandoned``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from grpo_run.core.loop.pipeline import PipelineMonitor
from grpo_run.core.runlog import get_logger

_DOING = {"generating": "generating", "scoring": "scoring", "training": "in the learner step"}


def describe_waits(snapshot: Mapping[str, Any]) -> str:
    """What is in progress in a :meth:`PipelineMonitor.snapshot`, longest first."""
    parts = []
    if snapshot.get("syncing") is not None:
        parts.append((snapshot["syncing_s"], f"the engine loading the weights of step {snapshot['syncing']}"))
    if snapshot.get("evaluating"):
        parts.append((snapshot.get("evaluating_s", 0.0), "the evaluation"))
    for batch in snapshot.get("batches", []):
        if batch["phase"] in _DOING:
            parts.append((batch["in_phase_s"], f"batch {batch['index']} {_DOING[batch['phase']]}"))
    if not parts:
        return "the next step"
    parts.sort(key=lambda p: -p[0])
    return "; ".join(f"{what} for {seconds:.0f} s" for seconds, what in parts)


class WaitReporter:
    """Prints (through ``say``) and logs what the loop waits for when it has been quiet."""

    def __init__(self, monitor: PipelineMonitor, say: Callable[[str], None], every_s: float,
                 also: Callable[[], str | None] | None = None) -> None:
        self.monitor = monitor
        self.also = also
        """More about what is in progress (the environment's calls), or None when it has nothing."""
        self.say = say
        self.every_s = every_s
        self._reported_at: float | None = None

    async def run(self) -> None:
        """Until cancelled: :meth:`check` once a second."""
        if self.every_s <= 0:
            return
        while True:
            await asyncio.sleep(min(1.0, self.every_s))
            self.check()

    def check(self) -> None:
        """Report when the loop has been quiet for ``every_s`` and nothing was reported in the
        last ``every_s``."""
        now = self.monitor.clock()
        quiet = now - self.monitor.last_change
        since = max(self.monitor.last_change, self._reported_at or 0.0)
        if quiet >= self.every_s and now - since >= self.every_s:
            self._reported_at = now
            doing = describe_waits(self.monitor.snapshot())
            extra = self.also() if self.also is not None else None
            if extra:
                doing = f"{doing}; {extra}"
            self.say(f"still waiting ({quiet:.0f} s without progress): {doing}")
            get_logger().info("waiting", quiet_s=round(quiet, 1), doing=doing)
