"""The vllm engine on CUDA: generation equal to hf, NCCL weight transfer (trainer on one GPU,
engine on another) and sleep mode between rollouts. Marked ``gpu``: skipped cleanly without
CUDA, and with the reason where this interpreter has no vLLM (`pip install '.[vllm]'` puts vLLM's
CUDA build in it; the engine's worker runs ``sys.executable``)."""

from __future__ import annotations

import asyncio
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from grpo_run import EngineContext, SamplingParams
from support.optional import requires
from support.vllm import chat_prompts, resolve_model, wait_for

pytestmark = [pytest.mark.gpu, pytest.mark.heavy, requires("vllm", "pip install '.[vllm]' (docs/gpu.md)")]

GREEDY = SamplingParams(n=1, max_new_tokens=8, greedy=True)


def gpu_engine(plugin_host, model_dir, **options):
    cls = plugin_host.registry.get("engine", "vllm")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    ctx = EngineContext(model_path=model_dir, tokenizer=tokenizer, dtype=torch.float32, device="cuda:0", seed=3)
    config = cls.Config(python=sys.executable, gpu_memory_utilization=0.3, kv_cache_memory_gb=1.0, **options)
    return cls(config, ctx)


def hf_greedy(model_dir, state, prompts, tokenizer):
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to("cuda:0").eval()
    model.load_state_dict(state)
    outs = []
    with torch.no_grad():
        for p in prompts:
            ids = model.generate(torch.tensor([p], device="cuda:0"), max_new_tokens=8, do_sample=False,
                                 eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
            new = ids[0, len(p):].tolist()
            outs.append(tuple(new[: new.index(tokenizer.eos_token_id) + 1] if tokenizer.eos_token_id in new else new))
    return outs


def perturbed_cuda(model_dir, seed=0):
    state = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).state_dict()
    gen = torch.Generator().manual_seed(seed)
    return {k: (v + 0.05 * torch.randn(v.shape, generator=gen)).to("cuda:0") for k, v in state.items()}


@pytest.mark.parametrize("transfer", ["shm", "nccl"])
def test_cuda_generation_and_weight_transfer_match_hf(plugin_host, transfer):
    if transfer == "nccl" and torch.cuda.device_count() < 2:
        pytest.skip("NCCL weight transfer needs the trainer and the engine on different GPUs (2+ GPUs)")
    model_dir = resolve_model(plugin_host, "tiny-arithmetic")
    options = {"weight_transfer": transfer}
    if transfer == "nccl":
        options["cuda_visible_devices"] = "1"  # the engine on GPU 1, the trainer's tensors on GPU 0
    engine = gpu_engine(plugin_host, model_dir, **options)
    try:
        tokenizer = engine.tokenizer
        prompts = chat_prompts(tokenizer, [f"{i}+{(7 * i + 3) % 50}" for i in range(16)])
        base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).state_dict()
        ours = asyncio.run(engine.generate(prompts, GREEDY))
        assert [g[0].token_ids for g in ours] == hf_greedy(model_dir, base, prompts, tokenizer)
        changed = perturbed_cuda(model_dir)
        asyncio.run(engine.update_weights(changed, version=1))
        after = asyncio.run(engine.generate(prompts, GREEDY))
        assert [g[0].token_ids for g in after] == hf_greedy(model_dir, changed, prompts, tokenizer)
        assert {g[0].policy_version for g in after} == {1}
    finally:
        engine.close()


def test_sleep_between_rollouts_frees_gpu_memory_and_wakes_for_work(plugin_host):
    model_dir = resolve_model(plugin_host, "tiny-arithmetic")
    engine = gpu_engine(plugin_host, model_dir, sleep_between_rollouts=True)
    try:
        prompts = chat_prompts(engine.tokenizer, ["1+2", "30+4"])
        free_awake, _ = torch.cuda.mem_get_info(0)  # weights and the 1 GiB KV cache allocated
        asyncio.run(engine.generate(prompts, GREEDY))  # afterwards idle: the worker goes to sleep
        # Level-1 sleep frees the KV cache (and moves the weights to CPU memory).
        wait_for(lambda: torch.cuda.mem_get_info(0)[0] > free_awake + 2**29, 30, "the engine to free GPU memory")
        changed = perturbed_cuda(model_dir)
        asyncio.run(engine.update_weights(changed, version=1))  # wakes to load
        again = asyncio.run(engine.generate(prompts, GREEDY))
        assert [g[0].policy_version for g in again] == [1, 1]
        assert [g[0].token_ids for g in again] == hf_greedy(model_dir, changed, prompts, engine.tokenizer)
    finally:
        engine.close()
