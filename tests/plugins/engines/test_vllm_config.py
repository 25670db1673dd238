"""The vllm engine's config rules and weight buckets: no vLLM needed (default suite)."""

from __future__ import annotations

import sys
import tomllib
from multiprocessing import shared_memory

import pytest
import torch

from support.paths import EXAMPLES
from grpo_run.core.config.loading import parse_config
from grpo_run.core.errors import ConfigError
from grpo_run.plugins.engines.vllm import VLLMEngineConfig
from grpo_run.plugins.engines.vllm import worker as wire
from grpo_run.plugins.engines.vllm.config import PYTHON_ENV
from grpo_run.plugins.engines.vllm.engine import engine_arguments, vllm_sampling
from grpo_run.plugins.engines.vllm.weights import SharedMemoryWeights, bucket_size, plan_buckets
from grpo_run import EngineContext, SamplingParams


def example(**engine):
    data = tomllib.loads((EXAMPLES / "arithmetic.toml").read_text())
    data["engine"] = {"name": "vllm", "python": sys.executable, **engine}
    return data


def issues(plugin_host, data):
    with pytest.raises(ConfigError) as e:
        parse_config(data, plugin_host.registry, "arithmetic.toml")
    return {i.path: i.message for i in e.value.issues}


def test_a_valid_vllm_section_is_structured(plugin_host):
    cfg = parse_config(example(max_model_len=64, inflight_updates=False), plugin_host.registry)
    assert cfg.engine.name == "vllm"
    assert cfg.engine.config == VLLMEngineConfig(python=sys.executable, max_model_len=64)


def test_unknown_and_ill_typed_vllm_keys_are_rejected_with_their_path(plugin_host):
    found = issues(plugin_host, example(gpu_memory_utilisation=0.5, tensor_parallel_size=0, dtype="fp8"))
    assert set(found) == {"engine.gpu_memory_utilisation", "engine.tensor_parallel_size", "engine.dtype"}


def test_gpu_only_options_on_cpu_and_useless_inflight_updates_are_errors(plugin_host):
    data = example(sleep_between_rollouts=True, weight_transfer="nccl", inflight_updates=True, max_model_len=20)
    data["model"]["device"] = "cpu"
    found = issues(plugin_host, data)
    assert found == {
        "engine.sleep_between_rollouts": "needs a GPU (vLLM's sleep mode frees GPU memory); model.device is 'cpu'",
        "engine.weight_transfer": "'nccl' needs a GPU; model.device is 'cpu' (use 'shm')",
        "engine.inflight_updates": "has no effect with rollout.async_steps = 1 (weights only change between batches, "
                                   "when nothing is generating); set rollout.async_steps >= 2",
        "engine.max_model_len": "must be >= data.max_prompt_token_length + rollout.response_length = 24, got 20",
    }


def test_a_temperature_vllm_refuses_is_a_config_error_before_anything_loads(tmp_path, capsys):
    from grpo_run.cli.main import main
    from grpo_run.core.config.toml_writer import dumps_toml

    data = example()
    data["rollout"]["temperature"] = 2.5
    data["eval"] = {"num_samples": 2, "temperature": 3.0}
    path = tmp_path / "hot.toml"
    path.write_text(dumps_toml(data))
    assert main(["check", str(path)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "rollout.temperature: must be <= 2 with the vllm engine (vLLM samples at temperatures in [0, 2]), got 2.5" in err
    assert "eval.temperature: must be <= 2 with the vllm engine" in err and "got 3" in err
    data["rollout"]["temperature"], data["eval"]["temperature"] = 2.0, 1.0
    path.write_text(dumps_toml(data))
    assert main(["check", str(path)]) == 0


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="on a GPU machine 'auto' is a GPU")
def test_auto_device_on_a_cpu_machine_is_named_as_such(plugin_host):
    found = issues(plugin_host, example(weight_transfer="nccl"))
    assert found == {"engine.weight_transfer": "'nccl' needs a GPU; model.device is 'auto' (the CPU here) (use 'shm')"}


def test_the_worker_interpreter_must_exist_or_vllm_be_importable_here(plugin_host, monkeypatch, tmp_path):
    found = issues(plugin_host, example(python=str(tmp_path / "nope")))
    assert found == {"engine.python": f"engine.python = {str(tmp_path / 'nope')!r} is not an executable file"}
    data = example()
    del data["engine"]["python"]
    monkeypatch.setenv(PYTHON_ENV, str(tmp_path / "nope"))
    assert issues(plugin_host, data) == {
        "engine.python": f"${PYTHON_ENV} = {str(tmp_path / 'nope')!r} is not an executable file"}
    monkeypatch.delenv(PYTHON_ENV)
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    assert issues(plugin_host, data)["engine.python"].startswith(
        f"vLLM is not installed for this interpreter ({sys.executable}): install grpo-run[vllm]")


def test_sampling_maps_onto_vllm_keywords():
    assert vllm_sampling(SamplingParams(n=4, max_new_tokens=9, temperature=0.7, top_p=0.9)) == {
        "max_tokens": 9, "temperature": 0.7, "top_p": 0.9, "detokenize": False}
    assert vllm_sampling(SamplingParams(max_new_tokens=5, greedy=True, temperature=0.7, stop_strings=("\n",))) == {
        "max_tokens": 5, "temperature": 0.0, "stop": ["\n"], "include_stop_str_in_output": True}


def test_engine_arguments_ask_for_processed_logprobs_and_a_bounded_cpu_cache():
    ctx = EngineContext(model_path="/m", tokenizer=None, dtype=torch.bfloat16, device="cpu", seed=7)
    args = engine_arguments(VLLMEngineConfig(max_num_seqs=64), ctx)
    assert args["logprobs_mode"] == "processed_logprobs"
    assert (args["dtype"], args["seed"], args["max_num_seqs"]) == ("bfloat16", 7, 64)
    assert args["kv_cache_memory_bytes"] == 2**30
    gpu = engine_arguments(VLLMEngineConfig(dtype="float16", seed=1), EngineContext("/m", None, torch.float32, "cuda", 7))
    assert (gpu["dtype"], gpu["seed"]) == ("float16", 1) and "kv_cache_memory_bytes" not in gpu


def test_buckets_respect_the_size_limit_alignment_and_dtype():
    state = {"a": torch.zeros(10), "b": torch.zeros(30, dtype=torch.float64), "big": torch.zeros(100),
             "ids": torch.zeros(3, dtype=torch.int64)}
    buckets = plan_buckets(state, torch.bfloat16, bucket_bytes=128)
    # a: 20 bytes at 0; b: 60 bytes at 64 (fits: 124 <= 128); big: 200 bytes alone; ids: 24 bytes (int64 kept).
    assert [[(n, d, off) for n, _, d, off in b] for b in buckets] == [
        [("a", torch.bfloat16, 0), ("b", torch.bfloat16, 64)],
        [("big", torch.bfloat16, 0)],
        [("ids", torch.int64, 0)],
    ]
    assert [bucket_size(b) for b in buckets] == [124, 200, 24]


def test_a_bucket_round_trips_through_shared_memory_in_the_engines_dtype():
    state = {"w": torch.linspace(-3, 3, 37), "v": torch.arange(6, dtype=torch.float32).reshape(2, 3)}
    buckets = plan_buckets(state, torch.bfloat16, bucket_bytes=1 << 20)
    sender = SharedMemoryWeights(torch.bfloat16, 1 << 20)
    try:
        sender._ensure_segments(bucket_size(buckets[0]))
        sender._fill(sender.segments[0], buckets[0])
        # As the worker sees it (attach_shared_memory's tracker fix is for another process).
        seen = shared_memory.SharedMemory(name=sender.segments[0].name)
        try:
            for name, tensor, dtype, offset in buckets[0]:
                got = wire.view_in_buffer(seen.buf, dtype, tuple(tensor.shape), offset).clone()
                assert got.dtype == torch.bfloat16 and torch.equal(got, tensor.to(torch.bfloat16)), name
        finally:
            seen.close()
    finally:
        sender.close()
    assert sender.segments == []
