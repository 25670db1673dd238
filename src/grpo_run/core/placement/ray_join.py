"""Joining the Ray cluster at ``RAY_ADDRESS``: one line when it cannot be joined, within a bounded time.

``ray.init(address=...)`` against an address where no cluster answers retries for minutes (about
40 s an attempt, each a few lines of ``Failed to connect to GCS`` on stderr), and a cluster that
refuses this process's token prints ~20 lines of ``InvalidAuthToken`` before raising. Nor does a
first Ctrl-C end it: the retries run in Ray's C++ code, and Ray's exit handler waits on them.

So :func:`join_cluster` runs ``ray.init`` on a thread of its own while the main thread waits
(a signal reaches it at once), with the process's stderr (file descriptor 2, where Ray's C++ code
writes) going line by line into the run's log meanwhile; Python's ``sys.stderr`` still reaches
the console. It ends in one line when Ray raises, when Ray's messages say the cluster refused
the token (at once, not after Ray's retries), or when ``distributed.join_timeout_s`` passes. A
join given up on keeps its thread: stderr goes back to the console once Ray gives up too (and a
connection that comes through after all is shut down).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import ray
from ray.exceptions import AuthenticationError

from grpo_run.core.errors import RunError, UserError
from grpo_run.core.runlog import get_logger

REFUSED = ("InvalidAuthToken", "Unauthenticated")
"""Words of Ray's messages when the cluster refused this process's token."""


def join_cluster(address: str, timeout_s: float) -> None:
    """``ray.init(address=address)``; a :class:`UserError` or :class:`RunError` in one line when the
    cluster cannot be joined within ``timeout_s`` (see the module docstring)."""
    refused = threading.Event()
    outcome: list[BaseException | None] = []

    def said(line: str) -> None:
        get_logger().info("ray_output", line=line)
        if any(word in line for word in REFUSED):
            refused.set()

    def init() -> None:
        try:
            ray.init(address=address, logging_level=logging.WARNING)
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            outcome.append(exc)

    capture = StderrToLog(said)
    joining = threading.Thread(target=init, name="grpo-run-ray-join", daemon=True)
    joining.start()
    deadline = time.monotonic() + timeout_s
    try:
        while not outcome:
            if refused.is_set():
                raise join_error(address, AuthenticationError("InvalidAuthToken"))
            if time.monotonic() > deadline:
                raise RunError(
                    f"cannot join the Ray cluster at RAY_ADDRESS={address}: no answer within "
                    f"distributed.join_timeout_s = {timeout_s:g} s (is its head node running, and is this address "
                    f"its GCS address, as `ray start --head` printed it? Ray's own messages are in the run's log)")
            joining.join(0.1)
    except BaseException:
        threading.Thread(target=_after_giving_up, args=(joining, capture), name="grpo-run-ray-join-end",
                         daemon=True).start()
        raise
    capture.restore()
    if outcome[0] is not None:
        raise join_error(address, outcome[0]) from None


def _after_giving_up(joining: threading.Thread, capture: StderrToLog) -> None:
    """The join was given up on: once Ray gives up too, stderr goes back to the console; a
    connection that came through after all is closed."""
    joining.join()
    if ray.is_initialized():
        with contextlib.suppress(Exception):
            ray.shutdown()
    capture.restore()


def join_error(address: str, exc: BaseException) -> Exception:
    """What to say when ``ray.init(address=...)`` fails: a :class:`UserError` naming the token
    setup when the cluster refused this process's token (or it has none), else a :class:`RunError`."""
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and len(chain) < 10:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    text = " ".join(f"{type(e).__name__}: {e}" for e in chain)
    where = f"cannot join the Ray cluster at RAY_ADDRESS={address}"
    if any(isinstance(e, AuthenticationError) for e in chain) or "InvalidAuthToken" in text:
        mode = os.environ.get("RAY_AUTH_MODE")
        return UserError(
            f"{where}: it uses Ray's token-based authentication and refused this process "
            f"({'RAY_AUTH_MODE is not set here' if mode is None else f'RAY_AUTH_MODE={mode} here'}; "
            f"{_token_source()}). Export RAY_AUTH_MODE=token and give this process the cluster's token, which "
            f"`ray get-auth-token` prints on the head node: in ~/.ray/auth_token (or the RAY_AUTH_TOKEN variable, "
            f"or a file named by RAY_AUTH_TOKEN_PATH), as on every node (docs/scale-out.md)")
    return RunError(f"{where}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")


def _token_source() -> str:
    """Where this process's token would come from, and whether there is one."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return "the RAY_AUTH_TOKEN variable holds another token"
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or os.path.expanduser("~/.ray/auth_token")
    return f"the file {path} holds another token" if os.path.exists(path) else f"there is no file {path}"


class StderrToLog:
    """While it holds, what is written to file descriptor 2 (by C or C++ code, or Python objects
    opened on it) goes to ``said(line)``, line by line, from a thread of its own; ``sys.stderr``
    is pointed at the console meanwhile. :meth:`restore` puts everything back (once)."""

    def __init__(self, said: Callable[[str], Any]) -> None:
        self._said = said
        self._lock = threading.Lock()
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        self._console_fd = os.dup(2)
        read_end, write_end = os.pipe()
        os.dup2(write_end, 2)
        os.close(write_end)
        self._python_stderr = sys.stderr
        sys.stderr = io.TextIOWrapper(os.fdopen(self._console_fd, "wb", buffering=0, closefd=False),
                                      encoding="utf-8", errors="replace", line_buffering=True)
        self._reader = threading.Thread(target=self._read, args=(read_end,), name="grpo-run-stderr-to-log",
                                        daemon=True)
        self._reader.start()
        self._restored = False

    def restore(self) -> None:
        with self._lock:
            if self._restored:
                return
            self._restored = True
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os.dup2(self._console_fd, 2)  # the pipe's last write end closes: the reader ends
            sys.stderr = self._python_stderr
        self._reader.join(2.0)
        os.close(self._console_fd)

    def _read(self, fd: int) -> None:
        with os.fdopen(fd, "rb") as pipe:
            for raw in pipe:
                line = raw.decode("utf-8", "replace").rstrip()
                if line:
                    with contextlib.suppress(Exception):
                        self._said(line)
