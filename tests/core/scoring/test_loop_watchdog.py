"""An async verifier that blocks the event loop is named while it blocks and stops the run once
it returns; one that awaits properly is never flagged (docs/reliability.md)."""

from __future__ import annotations

import asyncio
import re

import pytest

from support import faulty_verifiers as faulty

from grpo_run import NoConfig
from grpo_run.core.errors import RunError
from grpo_run.core.scoring.loop_watchdog import StepMonitor, Tracked
from grpo_run.core.scoring.scorer import RewardScorer


def rows(n: int, verifier: str) -> list[dict]:
    return [{"id": f"r{i}", "ground_truth": None, "verifier": verifier} for i in range(n)]


def test_a_blocking_async_verifier_is_named_while_it_blocks_and_stops_the_run() -> None:
    scorer = RewardScorer({"blocker": (faulty.BlocksLoop, NoConfig())}, num_workers=0, timeout_s=1.0)
    warnings: list[str] = []
    scorer.show_warnings_with(warnings.append)
    with pytest.raises(RunError) as caught:
        asyncio.run(scorer.score(rows(3, "blocker"), ["a", "b", "c"]))
    scorer.close()
    # Warned once (at 1 s: the limit, shorter than the 2 s default), while the first call blocked.
    assert len(warnings) == 1 and re.fullmatch(
        r"async verifier 'blocker' has blocked the event loop for 1\.\d s: nothing else runs \(no generation, "
        r"no learner step, no timeout\) until it returns\. It calls something blocking inside `async def score`; "
        r"use an async client, or make `score` a plain def so it runs in a killable worker process", warnings[0])
    # Only the first call ran (1.5 s); the two queued behind it did not start.
    assert re.fullmatch(
        r"async verifier 'blocker' blocked the event loop for 1\.\d s in one call \(over its 1 s limit, "
        r"scoring\.timeout_s\): .*", str(caught.value))


def test_an_async_verifier_that_awaits_is_never_flagged() -> None:
    scorer = RewardScorer({"awaits": (faulty.AwaitsPolitely, NoConfig())}, num_workers=0, timeout_s=1.0)
    warnings: list[str] = []
    scorer.show_warnings_with(warnings.append)
    scored = asyncio.run(scorer.score(rows(4, "awaits"), ["a"] * 4))  # 0.6 s each, concurrently
    scorer.close()
    assert [s.reward for s in scored] == [1.0] * 4 and warnings == []


def test_tracked_passes_values_exceptions_and_cancellation_through() -> None:
    monitor = StepMonitor()

    async def value() -> int:
        await asyncio.sleep(0)
        return 7

    async def fails() -> None:
        await asyncio.sleep(0)
        raise ValueError("inner")

    async def main() -> tuple[int, bool]:
        got = await Tracked(value(), "v", monitor)
        with pytest.raises(ValueError, match="^inner$"):
            await Tracked(fails(), "f", monitor)
        cancelled = False
        try:
            async with asyncio.timeout(0.05):
                await Tracked(asyncio.sleep(10), "s", monitor)
        except TimeoutError:
            cancelled = True
        return got, cancelled

    assert asyncio.run(main()) == (7, True)
    assert monitor.current is None and set(monitor.longest_step_s) == {"v", "f", "s"}
