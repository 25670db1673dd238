"""The ``verifiers`` environment: environments written for the ``verifiers`` package (0.4.0) train unchanged.

``[environment] name = "verifiers"`` with ``env_id`` (the taskset id the package loads, as in
``vf eval <env_id>``) and ``env_args`` (more fields of its ``EnvConfig``). The environment is built
by the package's own loader (``resolve_env_config`` + ``load_environment``); each episode is ONE
rollout of it (``Env.run_episode``) on the task the row names (``verifiers_task``, its index in the
taskset: the ``verifiers`` task source makes such rows). Every model request of the rollout reaches
:class:`~grpo_run.plugins.environments.verifiers_client.ChatClient`, the package's ``Client``
interface implemented over the episode's :class:`grpo_run.Chat`, so the rollout trains on exactly
the ids we sampled. The episode's reward is the reward the package computed for the rollout (the
sum of its weighted rewards); its metrics come back as ``verifiers/<env_id>/<metric>`` (averaged per
batch under ``env/``, like every environment metric).

A rollout that ran out of turns or tokens (:class:`~grpo_run.EpisodeOver` inside a model call)
keeps the reward the package scored (0 when scoring did not run) and counts ``truncated``; any other
error of the rollout drops the episode (counted against ``scoring.error_rate``).

The package's agents reach the model through its interception server (an aiohttp server on
127.0.0.1 that the harness program talks to). grpo-run runs the package on an event loop of its
own (one thread, ``Env.serving()`` entered once), gives each rollout's session our client in place
of the one the server made from the ``ModelContext`` (whose endpoint is never contacted), and runs
each ``chat.complete`` back on the runner's loop, so our turn batching is unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Mapping
from typing import Any

import attrs

from grpo_run import Chat, EpisodeResult, Tool

DEFAULTS: dict[str, Any] = {"agent": {"runtime": {"type": "subprocess"}}, "interception": {"type": "server"}}
"""What grpo-run sets unless ``env_args`` does: the harness runs on this machine, one loopback
interception server (the package's defaults are a Prime sandbox and a tunnelled pool)."""


def _merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        both = isinstance(value, Mapping) and isinstance(out.get(key), Mapping)
        out[key] = _merge(out[key], value) if both else value
    return out


def env_config(env_id: str, env_args: Mapping[str, Any]) -> Any:
    """The package's ``EnvConfig`` for ``env_id`` with ``env_args``; :class:`ValueError` saying what is wrong."""
    try:
        from verifiers.v1.utils.loaders import resolve_env_config
    except ImportError:
        raise ValueError("needs the verifiers package: pip install 'grpo-run[verifiers]'") from None
    data = _merge(DEFAULTS, env_args)
    data["taskset"] = {**dict(data.get("taskset") or {}), "id": env_id}
    try:
        return resolve_env_config(data)
    except ModuleNotFoundError as exc:
        raise ValueError(f"verifiers cannot load {env_id!r}: {exc}") from None
    except Exception as exc:  # the package's pydantic validation errors, plugin lookups
        first = str(exc).strip().splitlines()
        raise ValueError(f"verifiers rejects env {env_id!r}: {' '.join(first[:3])}") from None


def check_env_id(instance: Any, attribute: Any, value: str) -> None:
    if not value:
        raise ValueError("must name a verifiers taskset id")
    try:
        from verifiers.v1.utils.loaders import taskset_class
    except ImportError:
        raise ValueError("needs the verifiers package: pip install 'grpo-run[verifiers]'") from None
    try:
        taskset_class(value)
    except Exception as exc:
        raise ValueError(f"verifiers cannot load {value!r}: {str(exc).strip().splitlines()[0]}") from None


def check_env_args(instance: Any, attribute: Any, value: Mapping[str, Any]) -> None:
    env_config(instance.env_id, value)


@attrs.frozen
class VerifiersConfig:
    """Options of the ``verifiers`` environment."""

    env_id: str = attrs.field(validator=check_env_id)
    """The taskset id the ``verifiers`` package loads (an installed environment package, or a
    module on ``PYTHONPATH`` exporting its ``Taskset``)."""
    env_args: Mapping[str, Any] = attrs.field(factory=dict, validator=check_env_args)
    """More fields of the package's ``EnvConfig`` (e.g. ``{ taskset = { num_tasks = 64 } }``),
    over grpo-run's defaults: a local ``subprocess`` runtime and one loopback interception
    server."""


class ThreadSafeChat:
    """The episode's chat, called from the package's loop: each call runs on the runner's loop."""

    def __init__(self, chat: Chat, loop: asyncio.AbstractEventLoop) -> None:
        self.chat, self.loop = chat, loop

    async def complete(self, *args: Any, **kwargs: Any) -> Any:
        call = asyncio.run_coroutine_threadsafe(self.chat.complete(*args, **kwargs), self.loop)
        return await asyncio.wrap_future(call)


class VerifiersEnvironment:
    """One rollout of a ``verifiers`` environment per episode, sampled through the episode's chat."""

    name = "verifiers"
    Config = VerifiersConfig

    def __init__(self, config: VerifiersConfig, tools: Mapping[str, Tool]) -> None:
        from verifiers.v1.utils.loaders import load_environment

        self.config = config
        self.env = load_environment(env_config(config.env_id, config.env_args))
        self.tasks = list(self.env.taskset)
        self.prefix = f"verifiers/{config.env_id}/"
        self._clients: dict[str, Any] = {}
        """The episode client of each live rollout, by its trace id."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._lock = threading.Lock()

    def _serve(self) -> asyncio.AbstractEventLoop:
        """The package's own event loop (a thread), with ``Env.serving()`` entered and its sessions
        routed to our clients; started once."""
        with self._lock:
            if self._loop is not None:
                return self._loop
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="verifiers-env", daemon=True)
            thread.start()
            try:
                asyncio.run_coroutine_threadsafe(self._enter(), loop).result(timeout=120)
            except BaseException:
                loop.call_soon_threadsafe(loop.stop)
                raise
            self._loop, self._thread = loop, thread
            return loop

    async def _enter(self) -> None:
        stack = contextlib.AsyncExitStack()
        await stack.enter_async_context(self.env.serving())
        interception = self.env._interception  # verifiers/v1/env.py: set inside serving()
        acquire = interception.acquire

        @contextlib.asynccontextmanager
        async def ours(session: Any):
            async with acquire(session) as slot:  # registers the session (and the client it made)
                client = self._clients.get(session.trace.id)
                if client is None:
                    raise RuntimeError("a verifiers rollout that grpo-run did not start asked for the model")
                session.client = client
                yield slot

        interception.acquire = ours
        self._stack = stack

    def close(self) -> None:
        """Leave ``Env.serving()`` and stop the package's loop."""
        with self._lock:
            loop, self._loop = self._loop, None
        if loop is None:
            return
        if self._stack is not None:
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self._stack.aclose(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=30)

    def task_of(self, row: Mapping[str, Any]) -> Any:
        index = row.get("verifiers_task")
        if isinstance(index, bool) or not isinstance(index, int):
            raise RuntimeError(f"row {row.get('id')!r} has no verifiers_task index (use [task] name = \"verifiers\")")
        if not 0 <= index < len(self.tasks):
            raise RuntimeError(f"row {row.get('id')!r}: verifiers_task {index} is not in the taskset's "
                               f"{len(self.tasks)} tasks")
        return self.tasks[index]

    async def run_episode(self, row: Mapping[str, Any], seed: int, chat: Chat) -> EpisodeResult:
        from verifiers.v1.clients import ModelContext
        from verifiers.v1.configs.client import EvalClientConfig

        from grpo_run.plugins.environments.verifiers_client import ChatClient

        task = self.task_of(row)
        loop = await asyncio.to_thread(self._serve)
        client = ChatClient(ThreadSafeChat(chat, asyncio.get_running_loop()))
        traces: list[str] = []

        def minted(trace: Any) -> None:
            traces.append(trace.id)
            self._clients[trace.id] = client

        ctx = ModelContext(model="policy", client=EvalClientConfig(base_url="http://127.0.0.1:9/v1"))
        try:
            episode = await asyncio.wrap_future(
                asyncio.run_coroutine_threadsafe(self.env.run_episode(task, ctx, on_trace=minted), loop))
        finally:
            for trace_id in traces:
                self._clients.pop(trace_id, None)
        return self.result(episode, client)

    def result(self, episode: Any, client: Any) -> EpisodeResult:
        """The package's verdict on one rollout as our episode result (or the error that drops it)."""
        truncated = client.over is not None or any(t.is_truncated for t in episode.traces)
        if not episode.ok and client.over is None:
            errors = [*episode.errors, *(e for t in episode.traces for e in t.errors)]
            why = f"{errors[-1].type}: {errors[-1].message}" if errors else "the rollout failed"
            raise RuntimeError(f"the verifiers rollout of {self.config.env_id!r} failed: {why.strip()[:300]}")
        if not episode.traces:
            raise RuntimeError(f"the verifiers env {self.config.env_id!r} ran no rollout")
        reward = sum(t.reward for t in episode.traces)
        metrics: dict[str, float] = {"truncated": float(truncated)}
        for trace in episode.traces:
            for name, value in trace.metrics.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    metrics[self.prefix + name] = float(value)
            for name, value in trace.rewards.items():
                if value is not None:
                    metrics[self.prefix + "reward/" + name] = float(value.value)
        return EpisodeResult(float(reward), metrics)
