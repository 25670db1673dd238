"""Verifiers that misbehave the way real ones do, for the reliability tests (docs/reliability.md).

Module level (and named by import path, ``support.faulty_verifiers:Hang``) so worker processes
and ``grpo-run`` subprocesses started with ``PYTHONPATH=tests`` can import them.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any, ClassVar

from grpo_run import NoConfig, VerifierResult


class _Base:
    Config: ClassVar[type] = NoConfig

    def __init__(self, config: NoConfig) -> None:
        self.config = config


class Slow(_Base):
    """Length reward after 0.15 s: a run spends most of its time scoring, so a signal lands there."""

    name = "slow"

    def score(self, completion: str, ground_truth: Any, row: Any) -> float:
        time.sleep(0.15)
        return min(1.0, len(completion) / 5)


class Hang(_Base):
    """Never returns (in time)."""

    name = "hang"

    def score(self, completion: str, ground_truth: Any, row: Any) -> float:
        time.sleep(600)
        return 0.0


class HangRecording(Hang):
    """:class:`Hang`, after appending the row's id to the file named by ``$HANG_CALLS_FILE``."""

    name = "hang"

    def score(self, completion: str, ground_truth: Any, row: Any) -> float:
        with open(os.environ["HANG_CALLS_FILE"], "a") as fh:
            fh.write(f"{row['id']}\n")
        return super().score(completion, ground_truth, row)


class Abort(_Base):
    """Kills its worker process the hard way (SIGABRT), like a crash in native code."""

    name = "abort"

    def score(self, completion: str, ground_truth: Any, row: Any) -> float:
        os.abort()


class Exit(_Base):
    name = "exit"

    def score(self, completion: str, ground_truth: Any, row: Any) -> float:
        sys.exit(3)


class Raises(_Base):
    """Raises on every call, as a verifier with a bug does."""

    name = "raises"

    def score(self, completion: str, ground_truth: Any, row: Any) -> float:
        raise ValueError("this verifier always fails")


class RaisesKeyboardInterrupt(_Base):
    name = "kbint"

    def score(self, completion: str, ground_truth: Any, row: Any) -> float:
        raise KeyboardInterrupt


class InitFails(_Base):
    name = "initfails"

    def __init__(self, config: NoConfig) -> None:
        raise ValueError("cannot find my model")

    def score(self, completion: str, ground_truth: Any, row: Any) -> float:
        return 0.0


_LEAKED: list[bytearray] = []


class Leak(_Base):
    """Keeps 16 MiB per call alive forever; reports its process id."""

    name = "leak"

    def score(self, completion: str, ground_truth: Any, row: Any) -> VerifierResult:
        _LEAKED.append(bytearray(16 * 2**20))
        return VerifierResult(score=1.0, metrics={"pid": float(os.getpid())})


class Pid(_Base):
    """Scores 1.0 and reports its process id."""

    name = "pid"

    def score(self, completion: str, ground_truth: Any, row: Any) -> VerifierResult:
        return VerifierResult(score=1.0, metrics={"pid": float(os.getpid())})


class BlocksLoop(_Base):
    """An ``async def score`` that blocks the event loop (a sync sleep where an await belongs)."""

    name = "blocks-loop"
    seconds: ClassVar[float] = 1.5

    async def score(self, completion: str, ground_truth: Any, row: Any) -> float:
        time.sleep(self.seconds)
        return 1.0


class BlocksLoopLong(BlocksLoop):
    seconds = 120.0


class AwaitsPolitely(_Base):
    """An async verifier that waits 0.6 s the right way (many short steps)."""

    name = "awaits"

    async def score(self, completion: str, ground_truth: Any, row: Any) -> float:
        for _ in range(6):
            await asyncio.sleep(0.1)
        return 1.0


def path(cls: type) -> str:
    """The import path a config names ``cls`` by."""
    return f"{__name__}:{cls.__name__}"
