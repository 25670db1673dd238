"""Tools handed to an environment note their calls, so a hang can be traced to one.

A tool runs inside its environment's ``step``; when that step hangs or holds the event loop, the
report should say which tool it was in (``environment 'x' step (in tool 'python')``). Each tool
is wrapped: a call runs under :func:`~grpo_run.core.scoring.loop_watchdog.doing`; everything else
(``name``, ``schema()``, the tool's own attributes) passes through.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from grpo_run.core.scoring.loop_watchdog import doing


class NotedTool:
    """``tool`` whose calls note ``tool '<name>'`` on their thread."""

    def __init__(self, name: str, tool: Any) -> None:
        self._name = name
        self._tool = tool

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._tool, attr)

    def __call__(self, arguments: Mapping[str, Any]) -> Any:
        with doing(f"tool {self._name!r}"):
            return self._tool(arguments)


def noted_tools(tools: Mapping[str, Any]) -> dict[str, Any]:
    """``tools`` wrapped in :class:`NotedTool` (an ``async def __call__`` is left as it is: its
    work runs after the call returns)."""
    return {name: tool if inspect.iscoroutinefunction(getattr(tool, "__call__", None)) else NotedTool(name, tool)
            for name, tool in tools.items()}
