"""The vllm engine's memory, planned from its options without vLLM: the share of each GPU it
reserves, what fits inside it (and when it cannot start), tensor parallelism, sleep mode, and its
own GPUs named by ``cuda_visible_devices``."""

from __future__ import annotations

import pytest

import grpo_run
from grpo_run.plugins.engines.vllm.config import VLLMEngineConfig
from grpo_run.plugins.engines.vllm.memory import vllm_memory_parts

GIB = 2**30
# Qwen2.5-7B in bf16: 7.6B params, 28 layers, 4 KV heads of 128.
REQUEST = grpo_run.MemoryRequest(params=7_615_616_512, param_bytes=2, layers=28, kv_dim=512, vocab=152064,
                                 sequences=256, prompt_tokens=512, response_tokens=1024, device="cuda",
                                 device_bytes=80 * GIB, hidden=3584, context=32768)


def _parts(**options):
    return {p.name: p for p in vllm_memory_parts(VLLMEngineConfig(**options), REQUEST)}


def test_on_a_gpu_it_reserves_its_share_and_says_what_the_kv_cache_holds() -> None:
    share = _parts(gpu_memory_utilization=0.9)["reserved share"]
    assert share.bytes == pytest.approx(0.9 * 80 * GIB) and share.own_process and share.reserved
    assert not share.transient and share.spread == 1 and not share.problem
    # KV per token: 28 layers x 2 x 512 x 2 bytes = 56 KiB; 72 GiB less 14.2 GiB of weights and about 3 GiB
    # of activations and CUDA graphs leaves about 55 GiB of cache: about a million tokens.
    tokens = int(share.note.split("(")[-1].split(" tokens")[0].replace(",", ""))
    assert 950_000 < tokens < 1_080_000
    assert f"{tokens // 1536:,} sequences of 1,536 at once" in share.note


def test_tensor_parallelism_spreads_the_share_and_splits_the_weights() -> None:
    one, two = _parts(gpu_memory_utilization=0.5)["reserved share"], _parts(gpu_memory_utilization=0.5,
                                                                             tensor_parallel_size=2)["reserved share"]
    assert two.spread == 2 and two.bytes == one.bytes  # each GPU reserves its share
    assert "weights 14.2 GiB" in one.note and "weights 7.1 GiB" in two.note


def test_a_share_too_small_for_one_sequence_is_a_problem() -> None:
    assert "leave no room for a KV cache" in _parts(gpu_memory_utilization=0.15)["reserved share"].problem
    small = _parts(gpu_memory_utilization=0.2)["reserved share"]
    assert "less than one sequence of max_model_len = 32,768" in small.problem
    assert not _parts(gpu_memory_utilization=0.2, max_model_len=4096)["reserved share"].problem


def test_sleep_mode_frees_the_share_between_rollouts_and_keeps_the_weights_on_the_host() -> None:
    parts = _parts(sleep_between_rollouts=True)
    assert parts["reserved share"].transient
    asleep = parts["weights while asleep"]
    assert asleep.device == "cpu" and asleep.bytes == 7_615_616_512 * 2


def test_cuda_visible_devices_names_its_gpu() -> None:
    assert _parts(cuda_visible_devices="6,7", tensor_parallel_size=2)["reserved share"].device == "cuda:6"
    assert _parts()["reserved share"].device == ""  # placed by the run


def test_on_the_cpu_its_weights_and_kv_cache_space() -> None:
    cpu = grpo_run.MemoryRequest(params=135_000_000, param_bytes=4, layers=30, kv_dim=192, vocab=49152, sequences=64,
                                 prompt_tokens=96, response_tokens=48, device="cpu")
    parts = {p.name: p for p in vllm_memory_parts(VLLMEngineConfig(kv_cache_memory_gb=0.5), cpu)}
    assert parts["weights"].bytes == 135_000_000 * 4 and parts["KV cache"].bytes == 0.5 * GIB
