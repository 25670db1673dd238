"""The ``vllm`` generation engine: vLLM in a worker process of its own.

The worker (:mod:`.worker`) may run in another interpreter (``engine.python``): vLLM's CPU
wheel pins versions (torch, transformers) that grpo-run's own environment need not share. The
trainer side never imports vLLM except for the GPU-only NCCL transport.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import structlog

from grpo_run import (
    AdapterSlots, Completion, EngineContext, LoraAdapter, MemoryPart, MemoryRequest, RunError, SamplingParams,
)
from grpo_run.plugins.engines.vllm import worker as wire
from grpo_run.plugins.engines.vllm.adapters import AdapterFiles
from grpo_run.plugins.engines.vllm.client import DIED, WorkerClient, WorkerError, worker_environment
from grpo_run.plugins.engines.vllm.config import VLLMEngineConfig
from grpo_run.plugins.engines.vllm.memory import CPU_KV_CACHE_GB, vllm_memory_parts
from grpo_run.plugins.engines.vllm.weights import NcclWeights, SharedMemoryWeights

if TYPE_CHECKING:  # functions import torch when they run: `grpo-run check` loads this module without it
    import torch

log = structlog.get_logger()
SEED_MODULUS = 2**31 - 1


class VLLMEngine:
    """Generates with vLLM; loads new weights after every learner update (bounded in time), or a
    LoRA run's adapter (vLLM's LoRA support, the adapter reloaded in place)."""

    name = "vllm"
    Config = VLLMEngineConfig
    continuous_batching = True
    """Requests sent one by one share vLLM's batches: episode turns go as single requests."""

    @classmethod
    def memory_parts(cls, config: VLLMEngineConfig, request: MemoryRequest) -> list[MemoryPart]:
        """On a GPU, the share of each of its GPUs vLLM reserves (weights, activations and KV cache
        inside it; what it can hold is checked); on the CPU, its weights and KV cache space; in a
        process of its own either way (:mod:`.memory`: no vLLM needed)."""
        return vllm_memory_parts(config, request)

    def __init__(self, config: VLLMEngineConfig, context: EngineContext) -> None:
        import torch
        self.config = config
        self.tokenizer = context.tokenizer
        self.version = 0
        self.last_sync_s = 0.0
        self._seed = config.seed if config.seed is not None else context.seed
        self._calls = 0
        self._update_lock: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None
        self.completions = self.tokens = self.syncs = 0
        self.adapter: str | None = None
        """The adapter requests use: the last one loaded (``None``: the base model)."""
        self.adapter_files = AdapterFiles() if context.adapters is not None else None
        started = time.perf_counter()
        self.client = WorkerClient(
            config.worker_python(), engine_arguments(config, context) | worker_settings(config),
            worker_environment(worker_env(config, context)), startup_timeout_s=config.startup_timeout_s,
            forward_output=config.log_level != "error",
        )
        self.info = self.client.info
        log.info("vllm_engine_started", python=config.worker_python(), startup_s=round(time.perf_counter() - started, 2),
                 **self.info)
        dtype = getattr(torch, self.info["dtype"])
        bucket_bytes = config.weight_bucket_mb * 2**20
        self.weights: SharedMemoryWeights | NcclWeights = (
            NcclWeights(dtype, bucket_bytes, config.tensor_parallel_size, context.device)
            if config.weight_transfer == "nccl" else SharedMemoryWeights(dtype, bucket_bytes)
        )

    # -- generation ----------------------------------------------------------------------------

    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Completion]]:
        groups: list[list[Completion]] = [[] for _ in prompts]
        async for index, group in self.generate_stream(prompts, params):
            groups[index] = group
        return groups

    async def generate_stream(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> AsyncIterator[tuple[int, list[Completion]]]:
        """Yield ``(prompt_index, completions)`` as each prompt's ``params.n`` samples finish."""
        if not prompts:
            return
        key = self.client.new_key()
        queue = self.client.listen(key)
        finished = False
        try:
            seeds = self._seeds(len(prompts) * params.n, params)
            adapter = params.adapter if params.adapter is not None else self.adapter
            try:
                await self.client.send_watched((wire.GENERATE, key, [list(p) for p in prompts],
                                                vllm_sampling(params), seeds, adapter),
                                               f"generating with the weights of step {self.version}")
            except WorkerError as exc:
                raise WorkerError(f"vllm engine: cannot generate with the weights of step {self.version}: {exc}") from None
            for _ in range(len(prompts)):
                message = await self.client.receive(queue, self.config.response_timeout_s,
                                                    f"generating with the weights of step {self.version}")
                if message[0] == wire.GROUP:
                    group = [self._completion(*c) for c in message[3]]
                    self.completions += len(group)
                    self.tokens += sum(len(c.token_ids) for c in group)
                    yield message[2], group
                elif message[0] == DIED:
                    raise WorkerError(f"vllm engine: died while generating with the weights of step {self.version}: "
                                      f"{message[2]}")
                else:
                    raise RunError(f"vllm engine: generation failed: {message[2]}")
            finished = True
        finally:
            self.client.forget(key)
            if not finished and self.client.failure is None:  # stop what nobody will read
                try:
                    self.client.send((wire.ABORT, key))
                except WorkerError:
                    pass

    def _seeds(self, count: int, params: SamplingParams) -> list[int]:
        """One seed per sampled completion: a resumed run (same call counter) draws the same ones."""
        self._calls += 1
        base = params.seed if params.seed is not None else self._seed * 1_000_003 + self._calls
        return [(base * 100_003 + i) % SEED_MODULUS for i in range(count)]

    def _completion(self, tokens: list[int], logprobs: list[float], finish: str, first: int, last: int) -> Completion:
        if finish not in ("stop", "length"):
            raise RunError(f"vllm engine: a request ended with finish reason {finish!r}")
        return Completion(
            token_ids=tuple(tokens), logprobs=tuple(logprobs),
            text=self.tokenizer.decode(tokens, skip_special_tokens=True), finish_reason=finish,
            policy_version=first, last_policy_version=None if last == first else last,
        )

    # -- weights -------------------------------------------------------------------------------

    async def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Load ``state_dict`` as policy ``version``; a sync that does not finish within
        ``engine.weight_sync_timeout_s`` stops the worker and raises :class:`grpo_run.RunError`."""
        await self._timed_sync(lambda: self._sync(state_dict, version), version)

    @classmethod
    def refuses_adapter(cls, config: VLLMEngineConfig, lora: Mapping[str, Any]) -> str | None:
        """vLLM serves plain LoRA and rsLoRA adapters up to ``max_lora_rank``: not DoRA, trained
        biases or ``modules_to_save``."""
        return config.refused_adapter(lora)

    @classmethod
    def refuses_adapters(cls, config: VLLMEngineConfig, slots: AdapterSlots) -> str | None:
        """None: vLLM batches requests of different adapters (``max_loras`` = the slots)."""
        return None

    async def update_adapter(self, adapter: LoraAdapter, version: int) -> None:
        """Write ``adapter`` to the engine's private directory and have the worker reload it in
        place, between decode steps, as policy ``version`` (bounded like a weight sync)."""
        if self.adapter_files is None:
            raise RunError("vllm engine: started for full weights (EngineContext.adapters is None)")
        await self._timed_sync(lambda: self._sync_adapter(adapter, version), version)
        self.adapter = adapter.name

    async def _timed_sync(self, sync: Callable[[], Coroutine[Any, Any, None]], version: int) -> None:
        async with self._lock():
            start = time.perf_counter()
            limit = self.config.weight_sync_timeout_s
            try:
                await asyncio.wait_for(sync(), timeout=limit)
            except TimeoutError:
                self.client.kill()
                raise WorkerError(
                    f"vllm engine: the weight sync for step {version} did not finish within "
                    f"engine.weight_sync_timeout_s = {limit:g} s; the engine worker (pid {self.client.pid}) "
                    f"was stopped") from None
            except WorkerError as exc:
                if str(exc).startswith("vllm engine:"):  # says what it was doing already
                    raise
                raise WorkerError(f"vllm engine: the weight sync for step {version} failed: {exc}") from None
            self.version = version
            self.last_sync_s = time.perf_counter() - start
            self.syncs += 1

    async def _sync_adapter(self, adapter: LoraAdapter, version: int) -> None:
        assert self.adapter_files is not None
        try:
            path = await asyncio.to_thread(self.adapter_files.write, adapter)
        except OSError as exc:
            raise WorkerError(f"vllm engine: cannot write the adapter of step {version} to "
                              f"{self.adapter_files.root}: {exc}") from None
        answer = await self.client.call((wire.ADAPTER, self.client.new_key(), version, adapter.name, str(path)),
                                        f"loading the adapter of step {version}")
        if answer[0] != wire.ACK:
            raise WorkerError(f"vllm engine: loading the adapter of step {version} failed: {answer[2]}")

    async def _sync(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        doing = f"loading the weights of step {version}"
        answer = await self.client.call((wire.UPDATE_BEGIN, self.client.new_key(), version), doing)
        self._check_answer(answer, version)
        await self.weights.send(self.client, state_dict)
        answer = await self.client.call((wire.UPDATE_END, self.client.new_key(), version), doing)
        self._check_answer(answer, version)

    def _check_answer(self, answer: tuple, version: int) -> None:
        if answer[0] != wire.ACK:
            raise WorkerError(answer[2])

    def _lock(self) -> asyncio.Lock:
        """One update at a time (the loop's generator and evaluator may both ask for one); the
        lock belongs to the running event loop, and the engine may see several in turn."""
        loop = asyncio.get_running_loop()
        if self._update_lock is None or self._update_lock[0] is not loop:
            self._update_lock = (loop, asyncio.Lock())
        return self._update_lock[1]

    # -- state and lifetime --------------------------------------------------------------------

    def state_dict(self) -> dict[str, int]:
        """The sampling-seed counter, so a resumed run draws the same completions."""
        return {"calls": self._calls}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        self._calls = int(state["calls"])

    def close(self) -> None:
        self.client.close()
        self.weights.close()
        if self.adapter_files is not None:
            self.adapter_files.close()
        log.info("vllm_engine_closed", pid=self.client.pid, completions=self.completions, tokens=self.tokens,
                 weight_syncs=self.syncs, policy_version=self.version)


def vllm_sampling(params: SamplingParams) -> dict[str, Any]:
    """Our sampling parameters as vLLM ``SamplingParams`` keywords (one sample per request)."""
    out: dict[str, Any] = {"max_tokens": params.max_new_tokens}
    if params.greedy:
        out["temperature"] = 0.0
    else:
        out.update(temperature=params.temperature, top_p=params.top_p)
    if params.stop_strings:
        out.update(stop=list(params.stop_strings), include_stop_str_in_output=True)
    else:
        out["detokenize"] = False  # the trainer decodes; vLLM only needs text to find stop strings
    return out


def engine_arguments(config: VLLMEngineConfig, context: EngineContext) -> dict[str, Any]:
    """vLLM ``LLM(...)`` keyword arguments."""
    dtype = str(context.dtype).removeprefix("torch.") if config.dtype == "auto" else config.dtype
    args: dict[str, Any] = {
        "model": context.model_path, "dtype": dtype, "seed": config.seed if config.seed is not None else context.seed,
        "tensor_parallel_size": config.tensor_parallel_size, "enforce_eager": config.enforce_eager,
        "enable_prefix_caching": config.enable_prefix_caching, "gpu_memory_utilization": config.gpu_memory_utilization,
        # The log-probs of the distribution tokens are drawn from (temperature, top-p applied),
        # not of the raw logits: what the learner compares its own with.
        "logprobs_mode": "processed_logprobs",
    }
    for key in ("max_model_len", "max_num_seqs", "max_num_batched_tokens"):
        if getattr(config, key) is not None:
            args[key] = getattr(config, key)
    slots = context.adapters
    if slots is not None:  # LoRA adapters on the base model, one slot each
        args.update(enable_lora=True, max_lora_rank=config.lora_rank(slots.max_rank),
                    max_loras=slots.count, max_cpu_loras=slots.count)
        if slots.target_modules is not None:  # adapter layers only where adapters have weights
            args["lora_target_modules"] = list(slots.target_modules)
    kv_gb = config.kv_cache_memory_gb
    if kv_gb is None and not context.device.startswith("cuda"):
        kv_gb = CPU_KV_CACHE_GB
    if kv_gb is not None:
        args["kv_cache_memory_bytes"] = int(kv_gb * 2**30)
    return args


def worker_settings(config: VLLMEngineConfig) -> dict[str, Any]:
    """What the worker itself reads from its options (not passed to vLLM)."""
    return {"inflight_updates": config.inflight_updates, "sleep_between_rollouts": config.sleep_between_rollouts,
            "weight_transfer": config.weight_transfer, "initial_version": 0}


def worker_env(config: VLLMEngineConfig, context: EngineContext) -> dict[str, str]:
    import torch
    env = {
        # The worker is already a process of its own: run vLLM's engine core inside it.
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "VLLM_LOGGING_LEVEL": config.log_level.upper(),
        "TOKENIZERS_PARALLELISM": "false",
    }
    if not context.device.startswith("cuda"):
        # The trainer shares these cores: do not pin vLLM's threads to them; as many threads as ours.
        env["VLLM_CPU_OMP_THREADS_BIND"] = "nobind"
        env["OMP_NUM_THREADS"] = str(torch.get_num_threads())
    if config.cuda_visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = config.cuda_visible_devices
    return env
