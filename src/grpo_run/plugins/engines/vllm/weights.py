"""Moving new policy weights from the trainer into the vLLM worker.

Two transports, chosen by ``engine.weight_transfer``:

* ``shm`` (any device): the state dict is cast to the engine's dtype and copied into shared-memory
  buckets of at most ``engine.weight_bucket_mb``; the worker loads each bucket through vLLM's
  layerwise reload (``load_weights`` between ``initialize_layerwise_reload`` and
  ``finalize_layerwise_reload``, the steps of vLLM's own ``reload_weights``). Two buckets are in
  flight: the trainer fills one while the worker loads the other.
* ``nccl`` (GPU, trainer and engine on different GPUs): vLLM's weight-transfer API. The trainer
  joins an NCCL group as rank 0 (``trainer_init``) and broadcasts packed buckets
  (``packed_nccl_broadcast_producer``) while the worker receives them in ``update_weights``.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable, Mapping
from multiprocessing import shared_memory
from typing import TYPE_CHECKING, Any, TypeAlias

from grpo_run.plugins.engines.vllm import worker as wire
from grpo_run.plugins.engines.vllm.client import DIED, WorkerClient, WorkerError, settle

if TYPE_CHECKING:  # functions import torch when they run: `grpo-run check` loads this module without it
    import torch

Bucket: TypeAlias = "list[tuple[str, torch.Tensor, torch.dtype, int]]"
"""``(name, tensor, dtype to send it in, byte offset)`` of each tensor in one bucket."""


def plan_buckets(state_dict: Mapping[str, torch.Tensor], dtype: torch.dtype, bucket_bytes: int) -> list[Bucket]:
    """Consecutive tensors grouped into buckets of at most ``bucket_bytes`` (a bigger tensor gets
    a bucket of its own). Floating tensors travel in ``dtype`` (the engine's), others as they are."""
    buckets: list[Bucket] = []
    current: Bucket = []
    used = 0
    for name, tensor in state_dict.items():
        send_dtype = dtype if tensor.is_floating_point() else tensor.dtype
        size = wire.tensor_nbytes(send_dtype, tuple(tensor.shape))
        if current and wire.aligned(used) + size > bucket_bytes:
            buckets.append(current)
            current, used = [], 0
        offset = wire.aligned(used)
        current.append((name, tensor, send_dtype, offset))
        used = offset + size
    if current:
        buckets.append(current)
    return buckets


def bucket_size(bucket: Bucket) -> int:
    name, tensor, dtype, offset = bucket[-1]
    return offset + wire.tensor_nbytes(dtype, tuple(tensor.shape))


async def expect_ack(client: WorkerClient, key: int, queue: asyncio.Queue, what: str) -> Any:
    try:
        message = await client.answer(queue, what)
    finally:
        client.forget(key)
    if message[0] == wire.ACK:
        return message[2]
    raise WorkerError(message[2] if message[0] == DIED else f"{what} failed: {message[2]}")


class SharedMemoryWeights:
    """The ``shm`` transport: two shared-memory segments, reused across updates."""

    SLOTS = 2

    def __init__(self, dtype: torch.dtype, bucket_bytes: int) -> None:
        self.dtype = dtype
        self.bucket_bytes = bucket_bytes
        self.segments: list[shared_memory.SharedMemory] = []

    async def send(self, client: WorkerClient, state_dict: Mapping[str, torch.Tensor]) -> int:
        """Load ``state_dict`` into the worker (between its update_begin and update_end); returns
        the bytes sent."""
        buckets = plan_buckets(state_dict, self.dtype, self.bucket_bytes)
        self._ensure_segments(max((bucket_size(b) for b in buckets), default=1))
        waiting: list[tuple[int, asyncio.Queue] | None] = [None] * self.SLOTS
        for index, bucket in enumerate(buckets):
            slot = index % self.SLOTS
            if waiting[slot] is not None:
                await expect_ack(client, *waiting[slot], what="loading a weight bucket")  # type: ignore[misc]
            await asyncio.to_thread(self._fill, self.segments[slot], bucket)
            key = client.new_key()
            queue = client.listen(key)
            layout = [(name, str(dtype).removeprefix("torch."), tuple(t.shape), offset) for name, t, dtype, offset in bucket]
            waiting[slot] = (key, queue)
            await client.send_watched((wire.BUCKET, key, self.segments[slot].name, layout, len(buckets) > 1),
                                      "loading a weight bucket")
        for item in waiting:
            if item is not None:
                await expect_ack(client, *item, what="loading a weight bucket")
        return sum(bucket_size(b) for b in buckets)

    def close(self) -> None:
        for segment in self.segments:
            segment.close()
            segment.unlink()
        self.segments = []

    def _ensure_segments(self, size: int) -> None:
        if self.segments and self.segments[0].size >= size:
            return
        self.close()
        self.segments = [shared_memory.SharedMemory(create=True, size=size) for _ in range(self.SLOTS)]

    @staticmethod
    def _fill(segment: shared_memory.SharedMemory, bucket: Bucket) -> None:
        import torch
        with torch.no_grad():
            for _name, tensor, dtype, offset in bucket:
                wire.view_in_buffer(segment.buf, dtype, tuple(tensor.shape), offset).copy_(tensor.detach())


class NcclWeights:
    """The ``nccl`` transport (GPU): vLLM's weight-transfer API, the trainer as NCCL rank 0."""

    def __init__(self, dtype: torch.dtype, bucket_bytes: int, num_workers: int, device: str) -> None:
        import torch
        self.dtype = dtype
        self.bucket_bytes = bucket_bytes
        self.world_size = 1 + num_workers
        self.device = torch.device(device)
        self.group: Any = None

    async def send(self, client: WorkerClient, state_dict: Mapping[str, torch.Tensor]) -> int:
        from vllm.distributed.weight_transfer.packed_tensor import packed_nccl_broadcast_producer

        if self.group is None:
            await self._connect(client)
        items = [(name, t) for name, t in state_dict.items()]
        dtypes = [self.dtype if t.is_floating_point() else t.dtype for _, t in items]
        update_info = {"names": [n for n, _ in items], "dtype_names": [str(d).removeprefix("torch.") for d in dtypes],
                       "shapes": [list(t.shape) for _, t in items]}
        casts = dict(zip((n for n, _ in items), dtypes))

        def broadcast() -> None:
            import torch
            packed_nccl_broadcast_producer(
                iterator=iter(items), group=self.group, src=0,
                post_iter_func=lambda item: item[1].to(device=self.device, dtype=casts[item[0]]),
                buffer_size_bytes=self.bucket_bytes, num_buffers=2,
            )
            torch.cuda.current_stream().synchronize()

        key = client.new_key()
        queue = client.listen(key)
        await client.send_async((wire.NCCL_UPDATE, key, update_info))
        sent = run_in_daemon_thread(broadcast)
        await expect_ack(client, key, queue, what="receiving weights over NCCL")
        await sent
        return sum(wire.tensor_nbytes(d, tuple(t.shape)) for (_, t), d in zip(items, dtypes))

    async def _connect(self, client: WorkerClient) -> None:
        import torch
        from vllm.distributed.weight_transfer.nccl_common import trainer_init

        port = free_port()
        init_info = {"master_address": "127.0.0.1", "master_port": port, "rank_offset": 1,
                     "world_size": self.world_size, "packed": True,
                     "packed_buffer_size_bytes": self.bucket_bytes, "packed_num_buffers": 2}
        key = client.new_key()
        queue = client.listen(key)
        await client.send_async((wire.NCCL_INIT, key, init_info))
        # Both sides block in the rendezvous until the other arrives.
        torch.cuda.set_device(self.device)
        joined = run_in_daemon_thread(lambda: trainer_init(init_info))
        await expect_ack(client, key, queue, what="joining the NCCL weight-transfer group")
        self.group = await joined

    def close(self) -> None:
        if self.group is not None:
            self.group.destroy()
            self.group = None


def run_in_daemon_thread(fn: Callable[[], Any]) -> asyncio.Future:
    """``fn()`` in a daemon thread, as an awaitable. Not ``asyncio.to_thread``: an NCCL call whose
    peer died never returns, and the executor's threads would then block interpreter exit."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future = loop.create_future()

    def run() -> None:
        try:
            result = fn()
        except BaseException as exc:  # handed to the awaiting coroutine
            loop.call_soon_threadsafe(settle, future, None, exc)
        else:
            loop.call_soon_threadsafe(settle, future, result, None)

    threading.Thread(target=run, daemon=True, name="vllm-weight-transfer").start()
    return future


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
