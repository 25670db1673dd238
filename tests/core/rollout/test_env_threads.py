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
