"""The loop-lag meter: a loop held by code is busy for as long as it is held; a free loop is not."""

from __future__ import annotations

import asyncio
import time

from grpo_run.core.rollout.loop_lag import LoopLags


def _busy_s(hold_s: float) -> float:
    lags = LoopLags()

    async def main() -> float:
        holder = object()
        meter = lags.acquire(holder)
        started = time.monotonic()
        await asyncio.sleep(0.2)  # the meter's thread has probed the free loop
        time.sleep(hold_s)  # holds the loop
        await asyncio.sleep(0.2)
        busy = sum(end - start for start, end in meter.busy_stretches(started, time.monotonic()))
        lags.release(meter, holder)
        return busy

    try:
        return asyncio.run(main())
    finally:
        lags.close()


def test_a_loop_held_for_half_a_second_was_busy_for_about_that_long():
    assert 0.4 < _busy_s(0.5) <= 0.5


def test_a_free_loop_is_not_busy():
    assert _busy_s(0.0) < 0.05
