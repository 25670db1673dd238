"""Says which environment ended the trainer process, when its code calls ``os._exit``.

Environment code runs in the trainer process (unless ``environment.isolation = "process"``). A
call of ``os._exit(7)`` in a ``step`` ends that process at once: no exception to catch, no
``finally``, no ``atexit``; the run used to end with exit code 7 and nothing on the console. While
episodes can run, ``os._exit`` is replaced by a function that, called in the trainer process by
environment code -- on a thread running an environment call (:func:`inside`), or on the event
loop's thread while an environment's ``async def`` runs (its :class:`StepMonitor`) -- writes one
line naming the environment and the call (and the tool inside it, when one of the run's tools
runs), logs it, then exits as asked. The real ``os._exit`` is put back when the last runner closes.

A crash no Python code sees (a segfault or ``abort()`` in an extension module) is said by the
``grpo-run`` command's crash watcher instead (:mod:`grpo_run.core.crash_watch`), naming the
environment call from its frame's name. Not covered: C's ``exit()``. ``environment.isolation =
"process"`` keeps all of these out of the trainer: the worker's death fails its episodes only.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator

from grpo_run.core.runlog import get_logger
from grpo_run.core.scoring.loop_watchdog import StepMonitor, activity_of

_REAL_EXIT = os._exit


def real_exit(code: int) -> None:
    """End the process now (the run's own exits: they are not environment code's)."""
    _REAL_EXIT(code)

_local = threading.local()
_monitors: list[StepMonitor] = []
_lock = threading.Lock()
_pid = os.getpid()


@contextlib.contextmanager
def inside(label: str) -> Iterator[None]:
    """This thread runs environment code (``environment 'x' step``) for the block."""
    previous = getattr(_local, "label", None)
    _local.label = label
    try:
        yield
    finally:
        _local.label = previous


def watch(monitor: StepMonitor) -> None:
    """Name the environment whose ``async def`` calls ``monitor`` tracks, too; the first watch
    replaces ``os._exit``."""
    global _pid
    with _lock:
        if not _monitors:
            _pid = os.getpid()
            os._exit = _exit  # type: ignore[assignment]
        _monitors.append(monitor)


def unwatch(monitor: StepMonitor) -> None:
    """The runner of ``monitor`` is closed; the last one puts the real ``os._exit`` back."""
    with _lock:
        if monitor in _monitors:
            _monitors.remove(monitor)
        if not _monitors:
            os._exit = _REAL_EXIT  # type: ignore[assignment]


def running_here() -> str | None:
    """The environment call this thread runs now, if any (``environment 'x' step (in tool 'y')``)."""
    label = getattr(_local, "label", None)
    ident = threading.get_ident()
    if label is None:
        for monitor in list(_monitors):
            current = monitor.current
            if current is not None and monitor.thread == ident:
                label = current[0]
                break
    if label is None:
        return None
    activity = activity_of(ident)
    return f"{label} (in {activity})" if activity else label


def _exit(code: int) -> None:
    if os.getpid() == _pid:  # not a child forked by environment code, which exits its own way
        label = running_here()
        if label is not None:
            _say(label, code)
    _REAL_EXIT(code)


def _say(label: str, code: int) -> None:
    text = (f"run ended: {label} called os._exit({code}), which ends the trainer process at once: nothing since "
            f"the last checkpoint is saved. Environment code runs in the trainer; with environment.isolation = "
            f'"process" it runs in worker processes, where this fails only its episodes')
    try:
        get_logger().error("environment_ended_process", message=text, exit_code=code)
    except Exception:  # noqa: BLE001 - exiting anyway
        pass
    try:
        sys.stderr.flush()
        os.write(2, (text + "\n").encode("utf-8", "replace"))
    except OSError:
        pass
