"""What a vLLM engine holds, planned from its options alone (vLLM need not be installed).

On a GPU, vLLM takes ``gpu_memory_utilization`` of each of its ``tensor_parallel_size`` GPUs at
start (or, with ``kv_cache_memory_gb``, its weights, activations and that KV cache) and keeps it:
its share of the weights, the activations of its largest step, CUDA graphs and, in the rest, the
KV cache. It cannot start when its weights and activations leave no room for one sequence of
``max_model_len`` tokens. With ``sleep_between_rollouts`` it frees all of it between rollouts,
keeping the weights in the host's memory. On the CPU it holds its weights and the KV cache space
it is given (``kv_cache_memory_gb``, 1 GiB by default).
"""

from __future__ import annotations

from grpo_run import MemoryPart, MemoryRequest
from grpo_run.plugins.engines.vllm.config import VLLMEngineConfig

GIB = 2**30
CPU_KV_CACHE_GB = 1.0
CUDA_GRAPHS = GIB // 2
"""CUDA graphs of the decode batch sizes (none with ``enforce_eager``)."""
DEFAULT_BATCHED_TOKENS = 8192
DEFAULT_SEQS = 256
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def vllm_memory_parts(config: VLLMEngineConfig, request: MemoryRequest) -> list[MemoryPart]:
    """The parts of one engine (see the module docstring)."""
    width = request.param_bytes if config.dtype == "auto" else DTYPE_BYTES[config.dtype]
    weights = request.params * width
    if not (request.device == "cuda" and request.device_bytes):
        kv = (config.kv_cache_memory_gb or CPU_KV_CACHE_GB) * GIB
        parts = [MemoryPart("weights", weights, "a copy of the policy", own_process=True),
                 MemoryPart("KV cache", kv, "kv_cache_memory_gb", own_process=True)]
        if request.adapter_params:
            parts.append(MemoryPart("adapter slot", 2 * request.adapter_params * width,
                                    "the adapter, packed layers wrapped whole", own_process=True))
        return parts
    tp = config.tensor_parallel_size
    per_gpu = weights / tp
    tokens = config.max_num_batched_tokens or DEFAULT_BATCHED_TOKENS
    seqs = config.max_num_seqs or DEFAULT_SEQS
    # Its largest step: a few hidden-wide tensors per batched token, and the sampler's float32
    # logits and probabilities for every running sequence.
    activations = tokens * request.hidden * width * 8 / tp + 2 * seqs * request.vocab * 4
    graphs = 0 if config.enforce_eager else CUDA_GRAPHS
    # An adapter slot: vLLM wraps packed layers whole (a q/v adapter wraps all of qkv), at most
    # twice the adapter's own size.
    slot = 2 * request.adapter_params * width / tp
    kv_token = request.layers * 2 * request.kv_dim * width / tp
    sequence = request.prompt_tokens + request.response_tokens
    max_len = config.max_model_len or request.context or sequence
    if config.kv_cache_memory_gb is not None:
        kv = config.kv_cache_memory_gb * GIB
        share = per_gpu + slot + activations + graphs + kv
        how = f"weights {_gib(per_gpu)}, activations {_gib(activations + graphs)}, kv_cache_memory_gb"
    else:
        share = config.gpu_memory_utilization * request.device_bytes
        kv = share - per_gpu - slot - activations - graphs
        how = f"gpu_memory_utilization {config.gpu_memory_utilization:g}: weights {_gib(per_gpu)}, " \
              f"activations {_gib(activations + graphs)}"
    if slot:
        how += f", adapter slot {_gib(slot)}"
    held = int(max(0.0, kv) // kv_token) if kv_token else 0
    problem = ""
    if kv <= 0:
        problem = (f"its weights and activations ({_gib(per_gpu + activations + graphs)} per GPU) leave no room for "
                   f"a KV cache in the {_gib(share)} it may take (engine.gpu_memory_utilization)")
    elif held < max_len:
        problem = (f"its KV cache holds {held:,} tokens per GPU, less than one sequence of max_model_len = {max_len:,} "
                   "(raise engine.gpu_memory_utilization, or set engine.max_model_len)")
    at_once = held // max(1, sequence)
    how += f", KV cache {_gib(max(0.0, kv))} ({held:,} tokens: {at_once:,} sequences of {sequence:,} at once)"
    parts = [MemoryPart("reserved share", share, how, own_process=True, spread=tp, reserved=True,
                        transient=config.sleep_between_rollouts, problem=problem,
                        device=_first_gpu(config.cuda_visible_devices))]
    if config.sleep_between_rollouts:
        parts.append(MemoryPart("weights while asleep", weights, "offloaded to the host between rollouts",
                                own_process=True, device="cpu"))
    return parts


def _first_gpu(visible: str | None) -> str:
    """``"cuda:N"`` for the first GPU of ``engine.cuda_visible_devices`` (``""``: the run places it)."""
    first = (visible or "").split(",")[0].strip()
    return f"cuda:{int(first)}" if first.isdigit() else ""


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"
