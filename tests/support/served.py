"""A small object for worker-process tests (importable by a spawned child)."""

from __future__ import annotations

import os
import signal
import time


class Served:
    def __init__(self, offset: int) -> None:
        self.offset = offset

    def add(self, x: int) -> int:
        return x + self.offset

    def pid(self) -> int:
        return os.getpid()

    def sigint_disposition(self) -> bool:
        return signal.getsignal(signal.SIGINT) == signal.SIG_IGN

    def threads(self) -> str:
        return os.environ.get("OMP_NUM_THREADS", "")

    def fail(self) -> None:
        raise KeyError("no such row")

    def unpicklable(self):
        return lambda: None

    def sleep(self, seconds: float) -> str:
        time.sleep(seconds)
        return "woke"
