"""What runs inside Ray actors, and the driver's proxies for them (imported only with Ray).

* :class:`RayLearnerRank` is a :class:`~.learner_rank.LearnerRank` that can name a rendezvous on
  its own node and ships rank 0's weights (or a LoRA run's adapter tensors) into the object store
  (``ray.put``), so the driver hands engines a reference instead of the bytes.
* :class:`EngineActor` builds any registered engine from ``(class, config, EngineContext)`` and
  serves it; :class:`RemoteEngine` is its engine-shaped proxy on the driver, awaiting
  ``ObjectRef``\\ s on the loop's event loop.
* :class:`RayRankWorker` adapts an actor to the learner group's ``submit -> Future`` interface,
  turning a dead actor into :class:`~.processes.WorkerDied`.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from typing import Any

import ray
from ray.exceptions import RayActorError, RayTaskError

from grpo_run.core.errors import RunError
from grpo_run.core.placement.flat import FlatWeights
from grpo_run.core.placement.learner_rank import LearnerRank, RankSetup
from grpo_run.core.placement.local import free_port
from grpo_run.core.placement.processes import WorkerDied
from grpo_run.core.plugins.abilities import Stateful
from grpo_run.core.plugins.adapters import LoraAdapter
from grpo_run.core.plugins.types import Completion, EngineContext, SamplingParams


class RayLearnerRank(LearnerRank):
    def __init__(self, setup: RankSetup) -> None:
        super().__init__(setup, ship_weights=lambda flat: RemoteWeights(ray.put(flat.to_numpy()), flat.nbytes))

    def where(self) -> dict[str, Any]:
        return where_am_i()

    def rendezvous(self, loopback: bool = False) -> str:
        """``tcp://<this node's address>:<free port>`` for the process group (asked of rank 0);
        ``loopback``: every rank is on this machine, so 127.0.0.1."""
        host = "127.0.0.1" if loopback else ray.util.get_node_ip_address()
        return f"tcp://{host}:{free_port(host)}"


class RemoteWeights(Mapping[str, Any]):
    """Rank 0's weights in the object store: engines get the reference; reading it here fetches it."""

    def __init__(self, ref: ray.ObjectRef, nbytes: int) -> None:
        self.ref = ref
        self.nbytes = nbytes
        """The size of the weights, known without fetching them."""
        self._local: FlatWeights | None = None

    def _flat(self) -> FlatWeights:
        if self._local is None:
            self._local = ray.get(self.ref)
        return self._local

    def __getitem__(self, name: str) -> Any:
        return self._flat()[name]

    def __iter__(self):
        return iter(self._flat())

    def __len__(self) -> int:
        return len(self._flat())


class RayRankWorker:
    """One learner rank's actor, driven through futures; ``where`` is its :func:`where_am_i`."""

    def __init__(self, name: str, actor: Any, where: Mapping[str, Any]) -> None:
        self.name = name
        self.actor = actor
        self.where = where

    def submit(self, method: str, *args: Any) -> Future:
        out: Future = Future()
        try:
            inner = getattr(self.actor, method).remote(*args).future()
        except RayActorError as exc:
            out.set_exception(WorkerDied(f"{self.describe()} is gone: {exc}"))
            return out
        inner.add_done_callback(lambda done: _settle(out, done, self.describe()))
        return out

    def describe(self) -> str:
        return f"{self.name} ({describe_actor(self.where)})"

    def close(self, grace_s: float = 10.0) -> None:
        ray.kill(self.actor)

    def kill(self) -> None:
        ray.kill(self.actor)


def _settle(out: Future, done: Future, who: str) -> None:
    error = done.exception()
    if error is None:
        out.set_result(done.result())
    elif isinstance(error, RayActorError):
        out.set_exception(WorkerDied(f"{who} died: {error}"))
    elif isinstance(error, RayTaskError):
        out.set_exception(remote_cause(error))
    else:
        out.set_exception(error)


class EngineActor:
    """Serves one engine of any registered class inside a Ray actor (an async actor: generate
    calls run concurrently on its event loop, like in the driver)."""

    def __init__(self, cls: type, config: Any, context: EngineContext) -> None:
        self.engine = cls(config, context)

    async def where(self) -> dict[str, Any]:
        return where_am_i()

    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Completion]]:
        return await self.engine.generate(prompts, params)

    async def update_weights(self, weights: FlatWeights, version: int) -> None:
        await self.engine.update_weights(weights, version)

    async def update_adapter(self, name: str, config: Mapping[str, Any], tensors: FlatWeights, version: int) -> None:
        await self.engine.update_adapter(LoraAdapter(name, config, tensors), version)

    async def state_dict(self) -> dict[str, Any]:
        return self.engine.state_dict()

    async def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.engine.load_state_dict(state)

    async def close(self) -> None:
        self.engine.close()


class RemoteEngine:
    """The driver's engine-shaped proxy of an :class:`EngineActor`."""

    def __init__(self, name: str, actor: Any, where: Mapping[str, Any]) -> None:
        self.name = name
        self.actor = actor
        self.where = where
        self.version = 0
        self.continuous_batching = False
        """The engine class batches requests itself (set by :func:`remote_engine`)."""

    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Completion]]:
        return await self._await(self.actor.generate.remote(list(map(list, prompts)), params), "generate")

    async def update_weights(self, state_dict: Mapping[str, Any], version: int) -> None:
        ref = state_dict.ref if isinstance(state_dict, RemoteWeights) else ray.put(_flat_numpy(state_dict))
        await self._await(self.actor.update_weights.remote(ref, version), f"update_weights (step {version})")
        self.version = version

    async def update_adapter(self, adapter: LoraAdapter, version: int) -> None:
        """The adapter's tensors go by reference (put once by the learner, or here), its name and
        config by value."""
        tensors = adapter.tensors
        ref = tensors.ref if isinstance(tensors, RemoteWeights) else ray.put(_flat_numpy(tensors))
        await self._await(self.actor.update_adapter.remote(adapter.name, dict(adapter.config), ref, version),
                          f"update_adapter (step {version})")
        self.version = version

    async def _await(self, ref: Any, what: str) -> Any:
        try:
            return await ref
        except RayActorError as exc:
            raise self._died(what) from exc
        except RayTaskError as exc:
            raise remote_cause(exc) from None

    def _get(self, ref: Any, what: str) -> Any:
        """``ray.get`` for the synchronous calls (checkpoint state), with the same naming on death."""
        try:
            return ray.get(ref)
        except RayActorError as exc:
            raise self._died(what) from exc
        except RayTaskError as exc:
            raise remote_cause(exc) from None

    def _died(self, what: str) -> RunError:
        return RunError(
            f"{self.name} ({describe_actor(self.where)}) died during {what} "
            f"(holding the weights of step {self.version}); the run stops (checkpoints written before are intact)"
        )

    def close(self) -> None:
        try:
            ray.get(self.actor.close.remote(), timeout=10)
        except Exception:  # noqa: BLE001 - shutting down: the actor goes either way
            pass
        ray.kill(self.actor)


class StatefulRemoteEngine(RemoteEngine):
    """A :class:`RemoteEngine` whose engine class is :class:`~grpo_run.Stateful`."""

    def state_dict(self) -> dict[str, Any]:
        return self._get(self.actor.state_dict.remote(), "state_dict")

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._get(self.actor.load_state_dict.remote(dict(state)), "load_state_dict")


def remote_engine(name: str, cls: type, actor: Any, where: Mapping[str, Any]) -> RemoteEngine:
    proxy = StatefulRemoteEngine if issubclass(cls, Stateful) else RemoteEngine
    remote = proxy(name, actor, where)
    remote.continuous_batching = bool(getattr(cls, "continuous_batching", False))
    return remote


def remote_cause(error: RayTaskError) -> BaseException:
    """The exception an actor raised, as itself: its message stays one line (``as_instanceof_cause``
    would put the whole remote traceback into it); the traceback goes into a note, for the log."""
    cause = error.cause if isinstance(error.cause, BaseException) else None
    if cause is None:
        return error.as_instanceof_cause()
    cause.add_note(f"in {error.proctitle} (pid {error.pid} on {error.ip}):\n{error.traceback_str}")
    return cause


def where_am_i() -> dict[str, Any]:
    """The calling actor's id, process and node: how errors name it after it has died, and how the
    log shows where it was placed (``host`` is the node's IP address, as Ray names nodes)."""
    context = ray.get_runtime_context()
    return {
        "actor_id": context.get_actor_id(),
        "pid": os.getpid(),
        "host": ray.util.get_node_ip_address(),
        "node_id": context.get_node_id(),
        "hostname": socket.gethostname(),
    }


def placed(where: Mapping[str, Any]) -> dict[str, Any]:
    """The log's record of where an actor runs: its process and its node (id, IP address, host name)."""
    return {"pid": where["pid"], "node_id": where.get("node_id"), "node_ip": where["host"],
            "hostname": where.get("hostname")}


def describe_actor(where: Mapping[str, Any]) -> str:
    return f"Ray actor {str(where['actor_id'])[:12]}, pid {where['pid']} on {where['host']}"


def _flat_numpy(state_dict: Mapping[str, Any]) -> FlatWeights:
    flat = state_dict if isinstance(state_dict, FlatWeights) else FlatWeights.from_state_dict(state_dict)
    return flat.to_numpy()

