"""The ``agent`` environment: agent code written against an OpenAI client trains unchanged.

``[environment] name = "agent"`` with ``function = "module:attr"``, an ``async def f(row,
base_url) -> float``. Each episode calls it with the prompt row and a base URL of its own on the
loopback endpoint (:mod:`~grpo_run.plugins.environments.agent_server`); the agent talks to the
policy through any OpenAI-compatible client for as many turns as it likes and returns the
episode's reward. Every request is sampled through the episode's :class:`grpo_run.Chat`, so the
episode trains on exactly the sampled ids, masked and segmented like any other episode.

A malformed request is answered with HTTP 400 and drops the episode; so does an agent that raises,
or whose own code (time not spent waiting for the policy's answers) runs past
``environment.episode_timeout_s`` (the run goes on; the drop is counted).
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from grpo_run import Chat, EpisodeResult, Tool
from grpo_run.plugins.environments.agent_server import EpisodeServer, waiting


def load_agent_function(path: str) -> Callable[..., Any]:
    """The ``async def`` named by ``"module:attr"``; :class:`ValueError` saying what is wrong."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"must be 'module:function', got {path!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import {module_name!r} ({exc}); install it or put its directory on "
                         f"PYTHONPATH") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"module {module_name!r} has no {attr!r}")
        obj = getattr(obj, part)
    if not (inspect.iscoroutinefunction(obj) or inspect.iscoroutinefunction(getattr(obj, "__call__", None))):
        raise ValueError(f"{path!r} must be an async def f(row, base_url) -> float")
    return obj


def _importable(instance: Any, attribute: Any, value: str) -> None:
    load_agent_function(value)


@attrs.frozen
class AgentConfig:
    """Options of the ``agent`` environment."""

    function: str = attrs.field(validator=_importable)
    """``"module:function"``: an ``async def f(row, base_url) -> float`` (importable: installed,
    or its directory on ``PYTHONPATH``)."""
    max_request_bytes: int = attrs.field(default=1 << 20, validator=attrs.validators.gt(0))
    """A request body larger than this is answered with HTTP 413 and drops the episode."""
    max_requests_in_flight: int = attrs.field(default=16, validator=attrs.validators.gt(0))
    """Requests of one episode served at once (they take their turns one by one); one more is
    answered with HTTP 429 at once and its connection closed (OpenAI clients retry it)."""
    max_connections: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    """Connections the endpoint holds open at once, all episodes together; one more is answered
    with HTTP 429 at once and closed (OpenAI clients retry it). 0: an eighth of the process's
    open-file limit (its soft limit, lifted to the hard one), as the agent's own end of each
    connection takes a file of the trainer process too."""


class AgentEnvironment:
    """Runs an agent function per episode against the episode's OpenAI-compatible endpoint."""

    name = "agent"
    Config = AgentConfig

    def __init__(self, config: AgentConfig, tools: Mapping[str, Tool]) -> None:
        self.config = config
        self.label = config.function
        """How the run's messages name this environment's code (``still waiting`` lines)."""
        self.function = load_agent_function(config.function)
        self.server = EpisodeServer(config.max_request_bytes, config.max_requests_in_flight, config.max_connections)

    async def run_episode(self, row: Mapping[str, Any], seed: int, chat: Chat) -> EpisodeResult:
        if self.server.port == 0:
            with waiting(chat):  # the run's own set-up, not the agent's time
                await asyncio.to_thread(self.server.start)
        token = self.server.open_episode(chat, asyncio.get_running_loop())
        try:
            try:
                reward = await self.function(row, self.server.base_url(token))
            except Exception as exc:
                entry = self.server.episodes.get(token)
                if entry is not None and entry.errors:
                    raise RuntimeError(f"the agent sent a malformed request: {entry.errors[0]}") from exc
                raise RuntimeError(f"the agent {self.config.function} raised {type(exc).__name__}: {exc}") from exc
        finally:
            entry = self.server.close_episode(token)
        if entry.errors:
            raise RuntimeError(f"the agent sent a malformed request: {entry.errors[0]}")
        if isinstance(reward, bool) or not isinstance(reward, (int, float)):
            raise RuntimeError(f"the agent {self.config.function} returned {reward!r:.100}, not a number")
        return EpisodeResult(float(reward), {"requests": float(entry.requests)})

