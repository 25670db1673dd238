"""The vLLM engine's worker process: one vLLM ``LLMEngine`` driven step by step.

Run as ``python -P worker.py FD`` by :mod:`.client`, possibly with another interpreter than the
trainer's (``[engine] python``), so this file imports only the standard library at the top (torch
and vLLM inside the functions that use them); it never imports ``grpo_run`` (which that
interpreter may not have). The trainer imports it too, for the message names and the
weight-bucket layout.

Protocol: pickled tuples over a ``multiprocessing.connection.Connection`` (a Unix socket whose
descriptor is inherited as ``FD``), ``(kind, key, *payload)``:

trainer -> worker
  ``("generate", gid, prompts, sampling, seeds, adapter)``  add ``len(seeds)`` requests (``adapter``:
                                                   the name of a LoRA adapter, or ``None``: the base
                                                   model; one not loaded yet: the base model too)
  ``("update_begin", uid, version)``               start a weight update (drains first unless in-flight)
  ``("adapter", uid, version, name, path)``        a whole LoRA adapter update: drain (unless in-flight),
                                                   reload adapter ``name`` from ``path``, finish
  ``("bucket", uid, shm_name, layout, copy)``      load one bucket of tensors from shared memory
  ``("nccl_init", uid, init_info)`` / ``("nccl_update", uid, update_info)``   GPU weight transfer
  ``("update_end", uid, version)``                 finish the update; new requests use ``version``
  ``("abort", gid)``                                drop what is left of a generate request
  ``("shutdown", 0)``
worker -> trainer
  ``("ready", 0, info)``  ``("group", gid, prompt_index, completions)``  ``("ack", uid, payload)``
  ``("error", key, message)`` (that request failed)  ``("fatal", 0, message)`` (the worker is exiting)
  ``("heartbeat", 0)`` at least every :data:`HEARTBEAT_S` while it has requests: proof of progress

Between ``update_begin`` and ``update_end`` the engine is not stepped: the model's parameters
are mid-reload (vLLM's layerwise reload), so no decode step may run on them. With in-flight
updates that pause is all running requests see; without, running requests finish first and new
ones wait for the new weights. An adapter update is the same, one message long: vLLM reloads the
adapter under its id (``add_lora`` with ``load_inplace``, between decode steps, never as part of a
generate request, which would reload it at every step), and requests keep naming it without
``load_inplace``. A failed adapter load fails that update only: vLLM keeps the adapter it had.

Several adapters (a sweep's variants) each have a version of their own, which their requests'
completions carry; an adapter update drains only that adapter's requests and holds back only its
new ones, so the other adapters' requests keep running meanwhile.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import traceback
from collections import deque
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # functions import torch when they run: `grpo-run check` loads this module without it
    import torch

# -- what both sides share --------------------------------------------------------------------

READY, GROUP, ACK, ERROR, FATAL, HEARTBEAT = "ready", "group", "ack", "error", "fatal", "heartbeat"
GENERATE, UPDATE_BEGIN, BUCKET, UPDATE_END = "generate", "update_begin", "bucket", "update_end"
ADAPTER = "adapter"
NCCL_INIT, NCCL_UPDATE, ABORT, SHUTDOWN = "nccl_init", "nccl_update", "abort", "shutdown"

HEARTBEAT_S = 1.0
ALIGN = 64
"""Byte alignment of every tensor in a shared-memory bucket."""

Layout = list[tuple[str, str, tuple[int, ...], int]]
"""A bucket's tensors: ``(name, dtype name, shape, byte offset)``."""


def tensor_nbytes(dtype: torch.dtype, shape: tuple[int, ...]) -> int:
    import torch
    numel = 1
    for size in shape:
        numel *= size
    return numel * torch.empty((), dtype=dtype).element_size()


def aligned(offset: int) -> int:
    return (offset + ALIGN - 1) // ALIGN * ALIGN


def view_in_buffer(buffer: Any, dtype: torch.dtype, shape: tuple[int, ...], offset: int) -> torch.Tensor:
    """The tensor stored at ``offset`` of a shared-memory buffer (a view, not a copy)."""
    import torch
    numel = tensor_nbytes(dtype, shape) // torch.empty((), dtype=dtype).element_size()
    return torch.frombuffer(buffer, dtype=dtype, count=numel, offset=offset).view(shape)


def attach_shared_memory(name: str) -> Any:
    """Open the trainer's shared-memory segment without adopting it: before Python 3.13 every
    attach registers the segment with this process's resource tracker, which would unlink it
    (and warn of a "leak") when the worker exits although the trainer owns it."""
    from multiprocessing import resource_tracker, shared_memory

    shm = shared_memory.SharedMemory(name=name)
    if sys.version_info < (3, 13):
        resource_tracker.unregister(shm._name, "shared_memory")  # type: ignore[attr-defined]
    return shm


# -- reload steps, run on every vLLM worker through collective_rpc ----------------------------


def _begin_reload(worker: Any) -> None:
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

    with set_current_vllm_config(worker.vllm_config), torch.no_grad():
        initialize_layerwise_reload(worker.model_runner.get_model())


_ATTACHED: dict[str, Any] = {}
"""The trainer's segments, mapped once: they are reused by every update, and a fresh mapping
costs a page fault per page on first read."""


def _load_bucket(worker: Any, shm_name: str, layout: Layout, copy: bool) -> int:
    """Load one bucket. ``copy``: the trainer refills this buffer as soon as we acknowledge it,
    while vLLM's layerwise loader may keep a layer's tensors until the layer is complete (in a
    later bucket, or at finalize for padded ones) -- so take copies. An update of one bucket
    needs none: the buffer is not touched again before the update has ended."""
    import torch
    from vllm.config import set_current_vllm_config

    if shm_name not in _ATTACHED:
        _ATTACHED[shm_name] = attach_shared_memory(shm_name)
    buffer = _ATTACHED[shm_name].buf
    weights = [(name, view_in_buffer(buffer, getattr(torch, dtype), tuple(shape), offset))
               for name, dtype, shape, offset in layout]
    if copy:
        weights = [(name, tensor.clone()) for name, tensor in weights]
    with set_current_vllm_config(worker.vllm_config), torch.no_grad():
        worker.model_runner.get_model().load_weights(weights)
    return len(layout)


def _finish_reload(worker: Any) -> None:
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

    with set_current_vllm_config(worker.vllm_config), torch.no_grad():
        finalize_layerwise_reload(worker.model_runner.get_model(), worker.model_runner.model_config)


# -- the worker -------------------------------------------------------------------------------


class _Request:
    """One sampled completion being generated: tokens, log-probs and the versions that made them."""

    __slots__ = ("gid", "prompt", "sample", "adapter", "tokens", "logprobs", "first_version", "last_version", "finish")

    def __init__(self, gid: int, prompt: int, sample: int, adapter: str | None = None) -> None:
        self.gid, self.prompt, self.sample, self.adapter = gid, prompt, sample, adapter
        self.tokens: list[int] = []
        self.logprobs: list[float] = []
        self.first_version: int | None = None
        self.last_version: int | None = None
        self.finish = ""


class Worker:
    """Owns the ``LLMEngine``; serves one connection until ``shutdown`` or the trainer goes away."""

    def __init__(self, conn: Connection, options: dict[str, Any]) -> None:
        from vllm import LLM

        self.conn = conn
        self.inflight = bool(options.pop("inflight_updates"))
        self.sleep_when_idle = bool(options.pop("sleep_between_rollouts"))
        self.prefix_caching = bool(options.get("enable_prefix_caching", True))
        self.version = self.initial_version = int(options.pop("initial_version"))
        self.versions: dict[str, int] = {}  # adapter name -> its version
        self.nccl = options.pop("weight_transfer") == "nccl"
        if self.nccl:
            options["weight_transfer_config"] = {"backend": "nccl"}
        if self.sleep_when_idle:
            options["enable_sleep_mode"] = True
        self.llm = LLM(**options)
        self.engine = self.llm.llm_engine
        self.requests: dict[str, _Request] = {}
        self.groups: dict[tuple[int, int], list[_Request | None]] = {}
        self.waiting: deque[tuple] = deque()  # generate messages held back during an update
        self.update: tuple[str, int] | None = None  # ("draining" | "loading", uid)
        self.adapter_update: tuple[int, str, str] | None = None  # (version, name, path) of an adapter update
        self.loras: dict[str, Any] = {}  # adapter name -> the LoRARequest its requests carry
        self.asleep = False
        self.next_request = 0
        self.last_sent = time.monotonic()

    def send(self, message: tuple) -> None:
        self.conn.send(message)
        self.last_sent = time.monotonic()

    def info(self) -> dict[str, Any]:
        import vllm

        model_config = self.llm.llm_engine.model_config
        dtype = str(model_config.dtype).removeprefix("torch.")
        return {"vllm_version": vllm.__version__, "dtype": dtype, "max_model_len": model_config.max_model_len,
                "pid": os.getpid()}

    def serve(self) -> None:
        while True:
            if self.update is not None and self.update[0] == "draining" and self._drained():
                self._start_loading()
            # Decode steps run unless an update is loading weights (draining still steps).
            loading = self.update is not None and self.update[0] == "loading"
            stepping = not loading and self.engine.has_unfinished_requests()
            if self.conn.poll(0 if stepping else None):
                if not self.handle(self.conn.recv()):
                    return
                continue  # take every waiting message before the next decode step
            if stepping:
                self._step()
                if time.monotonic() - self.last_sent > HEARTBEAT_S:
                    self.send((HEARTBEAT, 0))
                if self.sleep_when_idle and self.update is None and not self.engine.has_unfinished_requests():
                    self.llm.sleep(level=1)
                    self.asleep = True

    # -- messages ------------------------------------------------------------------------------

    def handle(self, message: tuple) -> bool:
        kind, key = message[0], message[1]
        try:
            if kind == GENERATE:
                if self._held_back(message):
                    self.waiting.append(message)
                else:
                    self._add(*message[1:])
            elif kind == UPDATE_BEGIN:
                self._begin_update(key)
            elif kind == ADAPTER:
                self.adapter_update = (int(message[2]), str(message[3]), str(message[4]))
                self._begin_update(key)
            elif kind == BUCKET:
                self.send((ACK, key, self.llm.collective_rpc(_load_bucket, args=message[2:5])[0]))
            elif kind == NCCL_INIT:
                self._wake()
                self.llm.init_weight_transfer_engine({"init_info": message[2]})
                self.send((ACK, key, None))
            elif kind == NCCL_UPDATE:
                self.llm.update_weights({"update_info": message[2]})
                self.send((ACK, key, None))
            elif kind == UPDATE_END:
                self._finish_update(key, int(message[2]))
            elif kind == ABORT:
                self._abort(key)
            elif kind == SHUTDOWN:
                return False
            else:
                raise ValueError(f"unknown message {kind!r}")
        except Exception as exc:  # a bad request fails that request, not the worker
            if kind in (BUCKET, NCCL_INIT, NCCL_UPDATE, UPDATE_BEGIN, UPDATE_END):
                raise  # half-loaded weights: the worker cannot go on
            self.send((ERROR, key, f"{type(exc).__name__}: {exc}"))
        return True

    def _add(self, gid: int, prompts: list[list[int]], sampling: dict[str, Any], seeds: list[int],
             adapter: str | None = None) -> None:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        self._wake()
        lora = self.loras.get(adapter) if adapter is not None else None  # not loaded yet: the base model
        n = len(seeds) // max(1, len(prompts))
        prompt = {"prompt_token_ids": None}
        if self.prefix_caching:
            # Prefix-cache entries are keyed by the weights that computed them, so a request
            # started after an in-flight update never reuses KV computed by older weights.
            prompt["cache_salt"] = f"{adapter or 'policy'}-{self._version_of(adapter)}"
        for p, ids in enumerate(prompts):
            self.groups[(gid, p)] = [None] * n
            for s in range(n):
                params = SamplingParams(
                    n=1, seed=seeds[p * n + s], logprobs=0, output_kind=RequestOutputKind.DELTA, **sampling
                )
                rid = f"{gid}:{p}:{s}:{self.next_request}"
                self.next_request += 1
                self.requests[rid] = _Request(gid, p, s, adapter)
                self.engine.add_request(rid, {**prompt, "prompt_token_ids": list(ids)}, params, lora_request=lora)

    def _abort(self, gid: int) -> None:
        self.waiting = deque(m for m in self.waiting if m[1] != gid)
        ids = [rid for rid, r in self.requests.items() if r.gid == gid]
        if ids:
            self.engine.abort_request(ids)
        for rid in ids:
            del self.requests[rid]
        for group in [g for g in self.groups if g[0] == gid]:
            del self.groups[group]

    def _step(self) -> None:
        for out in self.engine.step():
            req = self.requests.get(out.request_id)
            if req is None:
                continue
            completion = out.outputs[0]
            if completion.token_ids:
                version = self._version_of(req.adapter)
                if req.first_version is None:
                    req.first_version = version
                req.last_version = version
                req.tokens.extend(completion.token_ids)
                req.logprobs.extend(d[t].logprob for d, t in zip(completion.logprobs, completion.token_ids))
            if out.finished:
                req.finish = completion.finish_reason or "length"
                del self.requests[out.request_id]
                self._complete(req)

    def _complete(self, req: _Request) -> None:
        group = self.groups[(req.gid, req.prompt)]
        group[req.sample] = req
        if all(r is not None for r in group):
            del self.groups[(req.gid, req.prompt)]
            done = [(r.tokens, r.logprobs, r.finish, r.first_version, r.last_version) for r in group if r]
            self.send((GROUP, req.gid, req.prompt, done))

    # -- weights -------------------------------------------------------------------------------

    def _version_of(self, adapter: str | None) -> int:
        """The version of what serves ``adapter``'s requests (``None``: the base model or the full weights)."""
        return self.version if adapter is None else self.versions.get(adapter, self.initial_version)

    def _drained(self) -> bool:
        """Whether the update may load: no request left that it must wait for (an adapter
        update: none of that adapter's)."""
        if self.adapter_update is not None:
            name = self.adapter_update[1]
            return not any(r.adapter == name for r in self.requests.values())
        return not self.engine.has_unfinished_requests()

    def _held_back(self, message: tuple) -> bool:
        """Whether a generate message waits for the update in progress (an adapter update holds
        back only the requests of its adapter)."""
        if self.update is None:
            return False
        if self.adapter_update is not None:
            return len(message) > 5 and message[5] == self.adapter_update[1]
        return True

    def _begin_update(self, uid: int) -> None:
        self._wake()
        self.update = ("draining", uid)
        if self.inflight or self._drained():
            self._start_loading()

    def _start_loading(self) -> None:
        assert self.update is not None
        uid = self.update[1]
        self.update = ("loading", uid)
        if self.adapter_update is not None:
            self._swap_adapter(uid, *self.adapter_update)
            return
        if self.nccl:
            self.llm.start_weight_update()
        else:
            self.llm.collective_rpc(_begin_reload)
        self.send((ACK, uid, "ready"))

    def _swap_adapter(self, uid: int, version: int, name: str, path: str) -> None:
        """Reload adapter ``name`` from ``path`` under its id (a new name gets the next id)."""
        from vllm.lora.request import LoRARequest

        start = time.perf_counter()
        self.adapter_update = None
        lora_id = self.loras[name].lora_int_id if name in self.loras else len(self.loras) + 1
        try:
            self.engine.add_lora(LoRARequest(name, lora_id, path, load_inplace=True))
        except Exception as exc:  # vLLM loads before it evicts: the adapter it had still serves
            self._end_update((ERROR, uid, f"{type(exc).__name__}: {exc}"))
            return
        self.loras[name] = LoRARequest(name, lora_id, path)
        self.versions[name] = version
        self._updated(uid, version, start)

    def _finish_update(self, uid: int, version: int) -> None:
        start = time.perf_counter()
        if self.nccl:
            self.llm.finish_weight_update()
        else:
            self.llm.collective_rpc(_finish_reload)
        self._updated(uid, version, start)

    def _updated(self, uid: int, version: int, start: float) -> None:
        # Frees what older weights cached (fails harmlessly while requests still run; the
        # per-version cache salt keeps those entries from being reused anyway: vLLM's prefix
        # hashes name an adapter, not its weights).
        self.llm.reset_prefix_cache()
        self.version = version
        self._end_update((ACK, uid, time.perf_counter() - start))

    def _end_update(self, answer: tuple) -> None:
        """Leave the update, answer it, then take the generate requests that waited for it."""
        self.update = None
        self.send(answer)
        while self.waiting and self.update is None:
            message = self.waiting.popleft()
            self.handle(message)

    def _wake(self) -> None:
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False


def main(argv: list[str]) -> int:
    # The trainer decides about Ctrl-C; a worker printing its own KeyboardInterrupt only adds noise.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn = Connection(int(argv[1]))
    try:
        options = conn.recv()
        worker = Worker(conn, options)
        conn.send((READY, 0, worker.info()))
        worker.serve()
        return 0
    except (EOFError, ConnectionError, BrokenPipeError):
        return 0  # the trainer went away: nothing to report to
    except BaseException:
        try:
            conn.send((FATAL, 0, traceback.format_exc(limit=20)))
        except (OSError, ValueError):
            pass
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
