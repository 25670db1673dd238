"""The environment thread pool replaces a thread whose call hangs, and bounds how many may hang."""

from __future__ import annotations

import asyncio
import threading

import pytest

from grpo_run.core.rollout.env_threads import DaemonThreadPool, TooManyHungCalls


def test_a_hung_call_is_abandoned_and_its_thread_replaced():
    release = threading.Event()
    pool = DaemonThreadPool(1, max_abandoned=1)

    async def go() -> None:
        with pytest.raises(asyncio.TimeoutError):
            await pool.run(release.wait, timeout=0.2)
        assert pool.hung == 1
        assert await pool.run(lambda: 7, timeout=1.0) == 7  # a new thread took the hung one's place

    asyncio.run(go())
    release.set()  # the hung call returns: its thread ends instead of joining the pool again
    for _ in range(50):
        if pool.hung == 0:
            break
        threading.Event().wait(0.02)
    assert pool.hung == 0
    pool.close()


def test_past_the_bound_calls_fail_instead_of_taking_threads():
    release = threading.Event()
    pool = DaemonThreadPool(1, max_abandoned=1, hang_grace_s=0.0)

    async def go() -> None:
        for _ in range(2):
            with pytest.raises(asyncio.TimeoutError):
                await pool.run(release.wait, timeout=0.1)
        with pytest.raises(TooManyHungCalls, match="2 calls hang"):
            await pool.run(lambda: 7, timeout=1.0)

    asyncio.run(go())
    release.set()
    pool.close()


def test_a_slow_call_past_its_timeout_does_not_count_as_hanging_within_the_grace():
    pool = DaemonThreadPool(1, max_abandoned=0, hang_grace_s=5.0)

    async def go() -> None:
        with pytest.raises(asyncio.TimeoutError):
            await pool.run(threading.Event().wait, 0.3, timeout=0.1)
        assert await pool.run(lambda: 7, timeout=1.0) == 7

    asyncio.run(go())
    pool.close()


def test_the_hung_calls_are_counted_by_what_they_are_and_add_up_to_the_number_that_hang():
    """The stop line said ``8 ... calls hang`` next to ``(step 10x)``: calls that timed out and
    returned later were counted too. Now only those still hanging, each named by what it runs."""
    release, slow = threading.Event(), threading.Event()
    pool = DaemonThreadPool(1, max_abandoned=1, hang_grace_s=0.3)

    async def go() -> TooManyHungCalls:
        with pytest.raises(asyncio.TimeoutError):  # timed out, returns within the grace: not hanging
            await pool.run(slow.wait, 0.3, timeout=0.05, what="reset")
        for _ in range(2):
            with pytest.raises(asyncio.TimeoutError):
                await pool.run(release.wait, timeout=0.05, what="step")
        await asyncio.sleep(0.5)
        with pytest.raises(TooManyHungCalls) as info:
            await pool.run(lambda: 7, timeout=1.0, what="step")
        return info.value

    exc = asyncio.run(go())
    release.set()
    pool.close()
    assert exc.hung == 2 and exc.calls == {"step": 2}
