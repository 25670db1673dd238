"""One environment call as the episode runner makes it: what fails an episode, what an
environment's own ``sys.exit()`` becomes, the return check run where the call ran, and the words
for a call that holds the event loop (:mod:`.episode_runner` uses them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class EpisodeFailed(Exception):
    """An episode could not finish (the environment raised, overran or returned garbage)."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


EXITS = (KeyboardInterrupt, SystemExit)
"""Raised by environment code itself (``sys.exit()``, ``raise KeyboardInterrupt``): a dropped
episode. The run's own Ctrl-C is a signal handler, never one of these inside an episode."""
BLOCKED_WARN_S = 2.0
"""An environment call holding the event loop this long is reported (or step_timeout_s if shorter)..."""
BLOCKED_REPEAT_S = 10.0
"""... and again every this many seconds while it still holds it."""
HANG_GRACE_S = 10.0
"""A synchronous call abandoned at step_timeout_s hangs when it still runs this much later (or
step_timeout_s later, if longer); more hanging calls than environment.workers stop the run."""


def describe_blocking(name: str, blocked: float) -> str:
    return (f"{name} has held the event loop for {blocked:.0f} s: nothing else runs (no generation, no "
            f"learner step, no timeout) until it returns. It calls something blocking "
            f"(time.sleep, a synchronous HTTP client) inside `async def`; await an async one instead, "
            f"or make it a plain def, which runs on a thread under environment.step_timeout_s")


def same(value: Any) -> Any:
    return value


def checked(fn: Callable[..., Any], args: tuple[Any, ...], check: Callable[[Any], Any]) -> Any:
    return check(fn(*args))


async def no_exit(awaitable: Any, what: str) -> Any:
    """``await awaitable``, with ``SystemExit``/``KeyboardInterrupt`` as an :class:`EpisodeFailed`:
    ``asyncio.wait_for`` runs it as a task (Python 3.11), and a task re-raises those two out of
    the event loop, ending the run with asyncio's teardown instead of dropping the episode."""
    try:
        return await awaitable
    except EXITS as exc:
        raise EpisodeFailed(f"environment {what} raised {type(exc).__name__}: {exc}") from exc
