"""What every check shares: the failure it raises, how it names a component, and running a
coroutine from a plain (sync) test.

Nothing here imports torch: the pytest plugin loads this package in every pytest session of an
environment with grpo-run installed, so the heavy imports wait until a check runs.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Coroutine
from typing import Any, TypeVar

import attrs

T = TypeVar("T")


class ContractError(AssertionError):
    """A component broke its family's contract.

    The message reads ``<family> <name>: <check>: <what was wrong, with the offending value>``;
    the three parts are also attributes, for a test that wants to look at them.
    """

    def __init__(self, family: str, component: str, check: str, detail: str) -> None:
        super().__init__(f"{family} {component!r}: {check}: {detail}")
        self.family = family
        self.component = component
        self.check = check
        self.detail = detail


class Reporter:
    """Raises :class:`ContractError` for one component (``fail(check, detail)``)."""

    def __init__(self, family: str, cls: type) -> None:
        self.family = family
        self.component = component_name(cls)

    def fail(self, check: str, detail: str) -> ContractError:
        """Build the error; ``raise reporter.fail(...)`` so the raise is visible at the call site."""
        return ContractError(self.family, self.component, check, detail)


def component_name(cls: Any) -> str:
    """``cls.name`` when it is a usable name, else the class's qualified name."""
    name = getattr(cls, "name", None)
    return name if isinstance(name, str) and name else getattr(cls, "__qualname__", repr(cls))


def default_config(cls: type, config: Any, report: Reporter) -> Any:
    """``config``, or ``cls.Config()`` when it is ``None``; checks it is a ``cls.Config``."""
    config_cls = getattr(cls, "Config", None)
    if not (isinstance(config_cls, type) and attrs.has(config_cls)):
        raise report.fail("contract", f"class attribute Config must be an attrs class, got {config_cls!r}")
    if config is None:
        try:
            return config_cls()
        except Exception as exc:
            raise report.fail("config", f"{config_cls.__qualname__}() has required options; pass a config "
                                        f"({type(exc).__name__}: {exc})") from exc
    if not isinstance(config, config_cls):
        raise report.fail("config", f"expected an instance of {config_cls.__qualname__}, got {config!r}")
    return config


def check_class(cls: type, family_key: str, report: Reporter) -> None:
    """The registry's own test of a component class (``name``, ``Config``, the required methods)."""
    from grpo_run.core.plugins.families import family
    from grpo_run.core.plugins.registry import component_class_problem

    problem = component_class_problem(cls, family(family_key))
    if problem is not None:
        raise report.fail("contract", problem)


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on a fresh event loop; in a thread when this thread already runs a loop
    (a check called from an async test)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def short(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
