"""The clock of an episode that drives itself (an agent): it counts the episode's code and its
own awaits, never its waits for the policy (from any thread, as the agent endpoint marks them)
nor the time its coroutine waited behind a busy event loop."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from grpo_run.core.rollout.driven_clock import DrivenClock
from grpo_run.core.rollout.loop_lag import LoopLags


async def _episode(clock: DrivenClock, body) -> DrivenClock:
    async with clock.running():
        await clock.steps(body())
    return clock


def test_waits_for_the_policy_do_not_count_however_they_nest_and_its_own_awaits_do():
    clock = DrivenClock(5.0)

    async def body():
        with clock.waiting():
            with clock.waiting():  # nested and overlapping waits (concurrent calls of one agent)
                await asyncio.sleep(0.2)
            await asyncio.sleep(0.2)
        await asyncio.sleep(0.3)  # its own

    asyncio.run(_episode(clock, body))
    assert 0.3 <= clock.spent_s < 0.45 and clock.run_s >= 0.4
    assert clock.awaiting_s == pytest.approx(clock.spent_s - clock.code_s)


def test_a_wait_marked_from_another_thread_counts_from_the_start_of_the_await_it_answers():
    """The agent endpoint's thread learns of a request only once it arrives: the agent's await
    began before that, and the way through the HTTP client and server is not its own time."""
    clock = DrivenClock(5.0)

    def server(answer: asyncio.Future, loop: asyncio.AbstractEventLoop) -> None:
        time.sleep(0.3)  # the request on its way
        with clock.waiting():
            time.sleep(0.3)  # served
        loop.call_soon_threadsafe(answer.set_result, "ok")

    async def body():
        loop = asyncio.get_running_loop()
        answer = loop.create_future()
        threading.Thread(target=server, args=(answer, loop)).start()
        assert await answer == "ok"

    asyncio.run(_episode(clock, body))
    assert clock.spent_s < 0.1 and clock.run_s >= 0.55


def test_the_episodes_code_counts_its_cpu_time():
    clock = DrivenClock(5.0)

    async def body():
        for _ in range(3):
            end = time.thread_time() + 0.1
            while time.thread_time() < end:
                pass
            await asyncio.sleep(0)

    asyncio.run(_episode(clock, body))
    assert 0.3 <= clock.code_s < 0.4 and clock.spent_s < 0.45


def test_an_episode_past_its_limit_is_cancelled_while_it_awaits_and_says_how_its_time_split():
    clock = DrivenClock(0.3)

    async def body():
        with clock.waiting():
            await asyncio.sleep(0.2)
        await asyncio.sleep(5)

    started = time.monotonic()
    with pytest.raises(TimeoutError):
        asyncio.run(_episode(clock, body))
    assert time.monotonic() - started < 2 and clock.expired
    assert clock.split().startswith("0.3 s of its own: 0.0 s running its code, 0.3 s awaiting other things than "
                                    "the policy; not counted: 0.2 s waiting for the policy, ")


def test_waiting_behind_other_episodes_code_on_the_event_loop_does_not_count():
    """64 episodes each sleep 0.1 s, then hold the loop for 0.05 s: each waits ~3 s for the loop
    after its sleep (the others' code), and counts only its own 0.15 s."""
    lags = LoopLags()

    async def main() -> list[DrivenClock]:
        clocks = [DrivenClock(1.0, lags) for _ in range(64)]

        async def body():
            await asyncio.sleep(0.1)
            end = time.thread_time() + 0.05
            while time.thread_time() < end:
                pass

        return list(await asyncio.gather(*(_episode(c, body) for c in clocks)))

    started = time.monotonic()
    clocks = asyncio.run(main())
    lags.close()
    assert time.monotonic() - started > 3
    assert all(not c.expired and c.spent_s < 0.5 for c in clocks), max(c.spent_s for c in clocks)
    assert max(c.loop_s for c in clocks) > 2
