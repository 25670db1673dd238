"""Learner-rank heartbeats: name a hung rank long before ``collective_timeout_s``.

A rank that hangs (stopped, deadlocked, stuck in a plugin) leaves its peers waiting in a
collective until ``learner.collective_timeout_s`` (600 s by default), and the collective's error
then comes from a *healthy* rank. So every rank beats: a thread writes, every :data:`BEAT_S`
seconds, into the process group's own key-value store (``torch.distributed.TCPStore``, already
running for the rendezvous) a small record -- when, how much CPU its process used, and whether
its main thread is inside torch or DeepSpeed (waiting in a collective, or computing) or
elsewhere. The driver (:class:`HeartbeatMonitor`) reads them while a call runs and stops the
step, naming the rank, after ``learner.hang_timeout_s`` when

* a rank has stopped beating (stopped by SIGSTOP, frozen, its machine gone), or
* every rank has been idle (no CPU) that long, and some are not inside torch: the others wait
  in a collective for those.

A long step in which the ranks compute, or one rank works while the others wait (rank 0 writing
a checkpoint), is left to ``collective_timeout_s``.
"""

from __future__ import annotations

import datetime
import json
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlparse

BEAT_S = 2.0
"""Seconds between two beats of a rank."""
IDLE_CPU_FRACTION = 0.05
"""A rank whose process used less than this share of one core since its previous beat is idle."""
_KEY = "grpo_run/heartbeat/{rank}"
_LIBRARIES = ("/torch/", "/deepspeed/")


def _store(init_method: str, timeout_s: float) -> Any:
    """A client of the rendezvous store at ``tcp://host:port``."""
    from torch.distributed import TCPStore

    url = urlparse(init_method)
    return TCPStore(url.hostname, url.port, is_master=False, timeout=datetime.timedelta(seconds=timeout_s),
                    wait_for_workers=False)


def _in_library(frame: Any) -> bool:
    """Whether the innermost Python frame of a thread is torch's or DeepSpeed's code."""
    return frame is not None and any(part in frame.f_code.co_filename for part in _LIBRARIES)


class RankHeartbeat:
    """The beating thread of one rank (started once the rank has joined the process group, by the
    thread that runs the rank's calls: the one whose frames it reports)."""

    def __init__(self, init_method: str, rank: int, interval_s: float = BEAT_S) -> None:
        self.rank = rank
        self.interval_s = interval_s
        self._main = threading.get_ident()  # the thread that runs the rank's calls (built in one)
        self._store = _store(init_method, timeout_s=30.0)
        self._beats = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-rank-{rank}", daemon=True)

    def start(self) -> RankHeartbeat:
        self._beat()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._beat()
            except Exception:  # noqa: BLE001 - the store is gone: the group is shutting down
                return

    def _beat(self) -> None:
        frame = sys._current_frames().get(self._main)  # noqa: SLF001 - the documented way to see another thread
        self._beats += 1
        record = {"beat": self._beats, "cpu": time.process_time(), "in_library": _in_library(frame),
                  "where": f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else ""}
        self._store.set(_KEY.format(rank=self.rank), json.dumps(record))


class HeartbeatMonitor:
    """The driver's view of every rank's beats (see the module docstring)."""

    def __init__(self, init_method: str, world_size: int, hang_timeout_s: float) -> None:
        self.world_size = world_size
        self.hang_timeout_s = hang_timeout_s
        self._store = _store(init_method, timeout_s=max(5.0, BEAT_S * 2))
        self._last: dict[int, dict[str, Any]] = {}
        """Per rank: its newest record, when it changed (driver's clock), since when it is idle."""
        self._store_answered = time.monotonic()

    def reset(self) -> None:
        """A new call begins: earlier idleness does not count."""
        now = self._store_answered = time.monotonic()
        for seen in self._last.values():
            seen["changed"] = seen["idle_since"] = now

    def check(self, ranks: Sequence[int]) -> tuple[str, list[int]] | None:
        """Whether ``ranks`` (still working on a call) look hung: ``(why, the hung ranks)`` by the
        rules above, or ``None`` while nothing is wrong."""
        now = time.monotonic()
        if not all([self._read(rank, now) for rank in range(self.world_size)]):
            if now - self._store_answered >= self.hang_timeout_s:  # rank 0 hosts the store
                return f"stopped responding (its rendezvous store has not answered for {self.hang_timeout_s:g} s)", [0]
            return None
        self._store_answered = now
        silent = [r for r in ranks if now - self._last[r]["changed"] >= self.hang_timeout_s]
        if silent:
            return f"stopped responding (no heartbeat for {self.hang_timeout_s:g} s)", silent
        if min(now - seen["idle_since"] for seen in self._last.values()) >= self.hang_timeout_s:
            stuck = [r for r in ranks if not self._last[r]["record"]["in_library"]]
            if stuck and len(stuck) < self.world_size:
                where = self._last[stuck[0]]["record"]["where"]
                return (f"is idle outside torch (at {where}) while the other ranks have waited for it "
                        f"{self.hang_timeout_s:g} s"), stuck
        return None

    def _read(self, rank: int, now: float) -> bool:
        """Take in ``rank``'s newest beat; False when the store did not answer."""
        try:
            raw = self._store.get(_KEY.format(rank=rank))
        except Exception:  # noqa: BLE001 - the store's host (rank 0) does not answer
            return False
        seen = self._last.setdefault(rank, {"raw": None, "record": {}, "changed": now, "idle_since": now, "cpu": None})
        if raw == seen["raw"]:
            return True
        record = json.loads(raw)
        elapsed = now - seen["changed"]
        busy = seen["cpu"] is not None and record["cpu"] - seen["cpu"] > IDLE_CPU_FRACTION * max(elapsed, BEAT_S)
        if busy or seen["cpu"] is None:
            seen["idle_since"] = now
        seen.update(raw=raw, record=record, changed=now, cpu=record["cpu"])
        return True
