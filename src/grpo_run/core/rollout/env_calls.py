"""One environment call as the episode runner makes it: what fails an episode, what an
environment's own ``sys.exit()`` becomes, the return check run where the call ran, the calls in
progress and the words for a call that holds the event loop (:mod:`.episode_runner` uses them)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

from grpo_run.core.crash_frames import named
from grpo_run.core.rollout import env_exit


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


class CallTiming:
    """When a call's environment code began and ended (``time.monotonic()``), as the thread
    running it saw them; None while not yet."""

    __slots__ = ("began", "ended")

    def __init__(self) -> None:
        self.began: float | None = None
        self.ended: float | None = None


def checked(fn: Callable[..., Any], args: tuple[Any, ...], check: Callable[[Any], Any], label: str,
            timing: CallTiming) -> Any:
    """``check(fn(*args))`` on this thread, which runs environment code (``label``: ``environment
    'x' step``) meanwhile; ``timing`` records when."""
    timing.began = time.monotonic()
    try:
        with env_exit.inside(label):
            return named(label)(_checked_call, fn, args, check)  # a crash report names the call
    finally:
        timing.ended = time.monotonic()


def _checked_call(fn: Callable[..., Any], args: tuple[Any, ...], check: Callable[[Any], Any]) -> Any:
    return check(fn(*args))


async def no_exit(awaitable: Any, what: str) -> Any:
    """``await awaitable``, with ``SystemExit``/``KeyboardInterrupt`` as an :class:`EpisodeFailed`
    at once (a task that let those two through would re-raise them out of the event loop, ending
    the run with asyncio's teardown instead of dropping the episode)."""
    try:
        return await awaitable
    except EXITS as exc:
        raise EpisodeFailed(f"environment {what} raised {type(exc).__name__}: {exc}") from exc


class CallsInFlight:
    """The environment's calls in progress (for the run's ``still waiting`` lines)."""

    def __init__(self) -> None:
        self._calls: dict[object, tuple[str, float, Any]] = {}

    @contextlib.contextmanager
    def call(self, what: str, chat: Any = None) -> Iterator[None]:
        """A call in progress for the block; ``chat``: the session of a ``run_episode``, whose
        ``pending`` and ``own_since`` say whether the episode waits for the policy or runs its own code."""
        key = object()
        self._calls[key] = (what, time.monotonic(), chat)
        try:
            yield
        finally:
            del self._calls[key]

    def describe(self, label: str, hung: int) -> str | None:
        """``environment 'x': 4 call(s) in progress, the longest step for 95 s, ...`` (None: nothing)."""
        now = time.monotonic()
        calls = list(self._calls.values())
        parts = []
        plain = [(what, since) for what, since, chat in calls if chat is None]
        if plain:
            what, since = min(plain, key=lambda c: c[1])
            parts.append(f"{len(plain)} call(s) in progress, the longest {what} for {now - since:.0f} s")
        chats = [chat for _, _, chat in calls if chat is not None]
        if chats:
            own = [now - chat.own_since for chat in chats if not chat.pending]
            longest = f", the longest for {max(own):.0f} s" if own else ""
            parts.append(f"{len(chats)} episode(s) in run_episode, {len(own)} of them in its own code (not waiting "
                         f"for the policy){longest}")
        if hung:
            parts.append(f"{hung} hung call(s) abandoned")
        return f"{label}: " + ", ".join(parts) if parts else None
