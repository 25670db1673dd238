"""Learner-rank heartbeats through a real rendezvous store (``torch.distributed.TCPStore``): a
rank that stops beating is named after ``hang_timeout_s``; ranks that beat are not; every rank
idle with one outside torch names that one. The whole runs (SIGSTOP of a DeepSpeed or Ray rank)
are in ``tests/cli/test_hung_rank.py``."""

from __future__ import annotations

import datetime
import time

import pytest
from torch.distributed import TCPStore

from grpo_run.core.placement.heartbeat import HeartbeatMonitor, RankHeartbeat
from grpo_run.core.placement.local import free_port

BEAT_S = 0.1
HANG_S = 1.0


@pytest.fixture
def rendezvous():
    port = free_port()
    store = TCPStore("127.0.0.1", port, 1, is_master=True, timeout=datetime.timedelta(seconds=10),
                     wait_for_workers=False)
    yield f"tcp://127.0.0.1:{port}"
    del store


def _watch(monitor: HeartbeatMonitor, ranks: list[int], seconds: float) -> tuple[str, list[int]] | None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        verdict = monitor.check(ranks)
        if verdict is not None:
            return verdict
        time.sleep(BEAT_S)
    return None


def test_a_rank_that_stops_beating_is_named_and_only_that_one(rendezvous) -> None:
    beats = [RankHeartbeat(rendezvous, rank, interval_s=BEAT_S).start() for rank in (0, 1)]
    monitor = HeartbeatMonitor(rendezvous, 2, hang_timeout_s=HANG_S)
    monitor.reset()
    try:
        # Both beat; this (main) thread is outside torch, but it burns CPU here, so not idle.
        deadline = time.monotonic() + 3 * HANG_S
        while time.monotonic() < deadline:
            assert monitor.check([0, 1]) is None
            sum(i * i for i in range(20_000))
        beats[1].stop()
        started = time.monotonic()
        verdict = _watch(monitor, [0, 1], 5 * HANG_S)
        assert verdict == (f"stopped responding (no heartbeat for {HANG_S:g} s)", [1])
        assert HANG_S <= time.monotonic() - started < HANG_S + 2.0
    finally:
        for beat in beats:
            beat.stop()


def test_every_rank_idle_names_the_ones_outside_torch(rendezvous) -> None:
    beats = [RankHeartbeat(rendezvous, rank, interval_s=BEAT_S).start() for rank in (0, 1)]
    monitor = HeartbeatMonitor(rendezvous, 2, hang_timeout_s=HANG_S)
    monitor.reset()
    try:
        # Both "ranks" live in this process, whose main thread sleeps here, outside torch: both
        # are idle outside torch, so neither waits for the other -- nobody is named.
        assert _watch(monitor, [0, 1], 3 * HANG_S) is None
        # Rank 1 alone is still working on the call (rank 0 answered): it is the one.
        verdict = _watch(monitor, [1], 3 * HANG_S)
        assert verdict is not None and verdict[1] == [1] and "is idle outside torch (at /" in verdict[0]
    finally:
        for beat in beats:
            beat.stop()
