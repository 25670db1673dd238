"""Frames named after the code that runs in them, so that a crash report can name it.

A fatal signal (a segmentation fault in an extension module, ``abort()``) ends the process before
any Python code could say what ran. :mod:`faulthandler` still writes every thread's frames, each
as ``File "...", line N in <name>``, the name being that of the frame's code. :func:`named` gives
a function that calls ``fn(*args)`` from a frame named :data:`PREFIX` + ``label``
(``grpo-run: environment 'x' step``); environment calls and the steps of environments' and async
verifiers' ``async def`` run through it, and :mod:`grpo_run.core.crash_watch` reads the label off
the crashing thread's frames. A leaf module: it imports nothing of grpo_run.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any

PREFIX = "grpo-run: "


def _call(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


@functools.lru_cache(maxsize=1024)
def named(label: str) -> Callable[..., Any]:
    """``call(fn, *args)``, whose frame is named ``PREFIX + label``."""
    code = _call.__code__.replace(co_name=PREFIX + label, co_qualname=PREFIX + label)
    return types.FunctionType(code, _call.__globals__, PREFIX + label)
