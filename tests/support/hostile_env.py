"""An environment package written with ordinary mistakes: each episode of a row returns one kind
of bad value from ``reset``, ``step`` or ``finish`` (issue 33). :func:`install` makes it an
installed distribution (a ``.dist-info`` with the ``grpo_run`` entry point), so ``grpo-run``
finds it as it finds any plugin package.

``kinds``: the bad values, handed to the rows in the order the rows are first reset (row 0 the
first kind, ...; once all were given, rows get them again); none (``kinds = []``): every episode
is normal, every call returns at once. ``every``: only every ``every``-th row gets one; the others
play a normal episode (reward 0.5, or 0.0 for a reply that is not digits, so groups have a spread).
"""

from __future__ import annotations

import itertools
import math
import os
import threading
from pathlib import Path
from typing import Any

import attrs

import grpo_run
from grpo_run import EnvReset, EnvStep

OK = [{"role": "user", "content": "1+2"}]
SURROGATE = "ok \ud800 not ok"

RESETS: dict[str, Any] = {
    "reset-messages-none": lambda: EnvReset(None),
    "reset-messages-int": lambda: EnvReset(7),
    "reset-message-str": lambda: EnvReset(["1+2"]),
    "reset-surrogate": lambda: EnvReset([{"role": "user", "content": SURROGATE}]),
    "reset-tool-str": lambda: EnvReset(OK, ["calculator"]),
    "reset-tool-surrogate": lambda: EnvReset(OK, [{"type": "function", "function": {"name": SURROGATE}}]),
    "reset-dict": lambda: {"messages": OK},
    "opening-100kb": lambda: EnvReset([{"role": "user", "content": "1+2 " * 25_000}], (), {"kind": None}),  # too long
}
STEPS: dict[str, Any] = {
    "reward-str": lambda: EnvStep((), "1.0", True),
    "reward-none": lambda: EnvStep((), None, True),
    "reward-huge-int": lambda: EnvStep((), 10**400, True),
    "reward-1e308": lambda: EnvStep((), 1e308, True),
    "reward-nan": lambda: EnvStep((), math.nan, True),
    "reward-bytes": lambda: EnvStep((), b"1", True),
    "messages-none": lambda: EnvStep(None, 0.0, False),
    "messages-int": lambda: EnvStep(3, 0.0, False),
    "message-str": lambda: EnvStep(["again"], 0.0, False),
    "message-surrogate": lambda: EnvStep([{"role": "user", "content": SURROGATE}], 0.0, False),
    "message-content-none": lambda: EnvStep([{"role": "user", "content": None}], 0.0, False),
    "messages-endless": lambda: EnvStep(itertools.repeat({"role": "user", "content": "again"}), 0.0, False),
    "metrics-none": lambda: EnvStep((), 0.0, True, None),
    "metrics-str": lambda: EnvStep((), 0.0, True, {"moves": "three"}),
    "step-dict": lambda: {"reward": 1.0, "done": True},
}


def _raise(exc: BaseException) -> Any:
    raise exc


RAISES: dict[str, Any] = {
    "step-exit": lambda: _raise(SystemExit(3)),
    "step-interrupt": lambda: _raise(KeyboardInterrupt()),
}
FINISHES: dict[str, Any] = {
    "finish-str": "0.5",
    "finish-huge-int": 10**400,
    "finish-1e308": -1e308,
}
ASYNC_FINISHES: dict[str, BaseException] = {
    "finish-async-exit": SystemExit("bye"),
    "finish-async-interrupt": KeyboardInterrupt(),
}
KINDS = [*RESETS, *STEPS, *RAISES, *FINISHES, *ASYNC_FINISHES]
ENDERS = ["step-os-exit", "finish-os-exit", "step-os-exit-once", "step-segfault"]
"""Kinds that end the process they run in (``os._exit(7)`` in ``step``, or in ``async def finish``;
``-once``: only the first such step of all processes, which creates the file ``once_file``; or
a segmentation fault in ``step``, reading address 0):
not in :data:`KINDS`, whose episodes a run survives."""

EXPECTED = {
    # What the episode's error says (a part of it), per kind.
    "reset-messages-none": "reset returned messages None, not a list of messages",
    "reset-messages-int": "reset returned messages 7, not a list of messages",
    "reset-message-str": "reset returned messages[0] '1+2', not a message (a mapping with str role and content)",
    "reset-surrogate": "reset returned messages[0].content is not valid text: surrogates not allowed '\\ud800' at "
                       "character 3",
    "reset-tool-str": "reset returned tools[0] 'calculator', not a tool schema",
    "reset-tool-surrogate": "reset returned tools[0] is not JSON (UnicodeEncodeError",
    "reset-dict": "reset returned {'messages': [{'content': '1+2', 'role': 'user'}]} (dict), not an EnvReset",
    "opening-100kb": "the opening messages render to ",
    "reward-str": "step returned reward '1.0', not a number",
    "reward-none": "step returned reward None, not a number",
    "reward-huge-int": "step returned reward an int of about 400 digits, not a float (OverflowError",
    "reward-1e308": "step returned reward 1e+308, outside environment.reward_range = [-100, 100]",
    "reward-nan": "step returned reward nan, not a finite number",
    "reward-bytes": "step returned reward b'1' (bytes), not a number",
    "messages-none": "step returned messages None, not a list of messages",
    "messages-int": "step returned messages 3, not a list of messages",
    "message-str": "step returned messages[0] 'again', not a message",
    "message-surrogate": "step returned messages[0].content is not valid text",
    "message-content-none": "step returned messages[0] {'content': None, 'role': 'user'} (dict), not a message",
    "messages-endless": "step returned more than 64 messages in one call (an endless iterator?)",
    "metrics-none": "step returned metrics None, not a mapping of names to numbers",
    "metrics-str": "step returned metrics['moves'] 'three', not a number",
    "step-dict": "step returned {'done': True, 'reward': 1.0} (dict), not an EnvStep",
    "step-exit": "environment step raised SystemExit: 3",
    "step-interrupt": "environment step raised KeyboardInterrupt: ",
    "finish-str": "finish returned reward '0.5', not a number",
    "finish-huge-int": "finish returned reward an int of about 400 digits",
    "finish-1e308": "finish returned reward -1e+308, outside environment.reward_range = [-100, 100]",
    "finish-async-exit": "environment finish raised SystemExit: bye",
    "finish-async-interrupt": "environment finish raised KeyboardInterrupt: ",
}


@attrs.frozen
class HostileConfig:
    kinds: list[str] = attrs.field(factory=lambda: list(KINDS))
    every: int = 1
    once_file: str = ""


class HostileEnv:
    """One-turn episodes; row ``i`` (in first-reset order) returns ``kinds[i % len(kinds)]``."""

    name = "hostile"
    Config = HostileConfig

    def __init__(self, config: HostileConfig, tools: Any) -> None:
        unknown = sorted(set(config.kinds) - set(KINDS) - set(ENDERS))
        if unknown:
            raise ValueError(f"unknown kinds {unknown}")
        self.config = config
        self._rows: dict[Any, str | None] = {}
        self._lock = threading.Lock()

    def kind_of(self, row: Any) -> str | None:
        if not self.config.kinds:  # well-behaved: every episode plays normally
            return None
        with self._lock:
            if row.get("id") not in self._rows:
                i = len(self._rows)
                kinds = self.config.kinds
                self._rows[row.get("id")] = kinds[(i // self.config.every) % len(kinds)] \
                    if i % self.config.every == 0 else None
            return self._rows[row.get("id")]

    def reset(self, row: Any, seed: int) -> Any:
        kind = self.kind_of(row)
        if kind in RESETS:
            return RESETS[kind]()
        return EnvReset([{"role": "user", "content": str(row.get("prompt", "1+2"))}], (), {"kind": kind})

    def step(self, state: Any, action: Any) -> Any:
        kind = state["kind"]
        if kind in STEPS:
            return STEPS[kind]()
        if kind in RAISES:
            return RAISES[kind]()
        if kind == "step-os-exit" or (kind == "step-os-exit-once" and self._first(self.config.once_file)):
            os._exit(7)
        if kind == "step-segfault":
            import ctypes

            ctypes.string_at(0)
        return EnvStep((), 0.5 if action.turn.text.strip().isdigit() else 0.0, True)

    @staticmethod
    def _first(path: str) -> bool:
        """Whether this call is the first of all processes to get here (it creates ``path``)."""
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        return True

    async def finish(self, state: Any) -> Any:
        kind = state["kind"]
        if kind in ASYNC_FINISHES:
            raise ASYNC_FINISHES[kind]
        if kind == "finish-os-exit":
            os._exit(7)
        return FINISHES.get(kind, 0.0)


@grpo_run.hookimpl
def grpo_run_register_environments(register: Any) -> None:
    register(HostileEnv)


def install(root: Path) -> Path:
    """This module as the installed distribution ``grpo-run-hostile`` under ``root`` (put ``root``
    on ``sys.path`` or ``PYTHONPATH``)."""
    from support.distributions import install_module  # here: the installed copy imports only grpo_run

    return install_module(root, "grpo_run_hostile", Path(__file__).read_text(encoding="utf-8"),
                          "grpo-run-hostile", "hostile")
