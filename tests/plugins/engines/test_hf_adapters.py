"""The hf engine's LoRA adapters (``update_adapter``): the same completions as the merged model,
loaded in place at every sync, and an adapter that does not fit refused before anything changes."""

from __future__ import annotations

import asyncio

import attrs
import pytest
import torch
from transformers import AutoTokenizer

from grpo_run import POLICY_ADAPTER, AdapterSlots, EngineContext, LoraAdapter, SamplingParams, TakesAdapters
from support.adapters import trained_adapter

peft = pytest.importorskip("peft", reason="LoRA needs the peft extra (pip install 'grpo-run[peft]')")


@pytest.fixture(scope="module")
def model_dir(plugin_host):
    source = plugin_host.registry.get("model", "tiny-arithmetic")
    return source(source.Config()).resolve()


def make_engine(plugin_host, model_dir, adapters):
    cls = plugin_host.registry.get("engine", "hf")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    return cls(cls.Config(), EngineContext(model_path=model_dir, tokenizer=tokenizer, dtype=torch.float32,
                                           device="cpu", seed=3, adapters=adapters))


def prompts(engine):
    tok = engine.tokenizer
    texts = [tok.apply_chat_template([{"role": "user", "content": c}], add_generation_prompt=True, tokenize=False)
             for c in ("1+2", "30+41", "7+19", "12+12")]
    return [tok(t, add_special_tokens=False)["input_ids"] for t in texts]


def generate(engine, params):
    return asyncio.run(engine.generate(prompts(engine), params))


@pytest.mark.parametrize("use_dora", [False, True])
def test_an_adapter_generates_what_the_merged_model_does(plugin_host, model_dir, use_dora):
    assert isinstance(plugin_host.registry.get("engine", "hf"), TakesAdapters)
    with_adapter = make_engine(plugin_host, model_dir, AdapterSlots(max_rank=4))
    merged = make_engine(plugin_host, model_dir, None)
    adapter, weights = trained_adapter(model_dir, seed=0, use_dora=use_dora)
    asyncio.run(with_adapter.update_adapter(adapter, version=3))
    asyncio.run(merged.update_weights(weights, version=3))
    for params in (SamplingParams(n=1, max_new_tokens=6, greedy=True),
                   SamplingParams(n=4, max_new_tokens=6, temperature=1.0, seed=11)):
        ours, theirs = generate(with_adapter, params), generate(merged, params)
        assert [[c.token_ids for c in g] for g in ours] == [[c.token_ids for c in g] for g in theirs]
        for a, b in zip((c for g in ours for c in g), (c for g in theirs for c in g)):
            assert a.policy_version == 3
            torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), rtol=0, atol=1e-5)


def test_each_sync_copies_into_the_same_tensors_and_changes_the_output(plugin_host, model_dir):
    engine = make_engine(plugin_host, model_dir, AdapterSlots(max_rank=4))
    greedy = SamplingParams(n=1, max_new_tokens=6, greedy=True)
    base = generate(engine, greedy)  # no adapter yet: the base model
    first, _ = trained_adapter(model_dir, seed=0)
    asyncio.run(engine.update_adapter(first, version=1))
    storage = {name: p.data_ptr() for name, p in engine.model.named_parameters()}
    second, _ = trained_adapter(model_dir, seed=1)
    asyncio.run(engine.update_adapter(second, version=2))
    assert {name: p.data_ptr() for name, p in engine.model.named_parameters()} == storage
    assert sum("lora_A" in name for name in storage) == 4 * 7  # every linear layer of the 4 blocks, once
    after = generate(engine, greedy)
    assert after[0][0].policy_version == 2
    assert [g[0].logprobs for g in after] != [g[0].logprobs for g in base]
    again = make_engine(plugin_host, model_dir, AdapterSlots(max_rank=4))
    asyncio.run(again.update_adapter(second, version=2))
    assert [g[0].logprobs for g in generate(again, greedy)] == [g[0].logprobs for g in after]


def test_an_adapter_that_does_not_fit_is_refused_before_a_tensor_changes(plugin_host, model_dir):
    engine = make_engine(plugin_host, model_dir, AdapterSlots(max_rank=4))
    adapter, _ = trained_adapter(model_dir, seed=0)
    asyncio.run(engine.update_adapter(adapter, version=1))
    greedy = SamplingParams(n=1, max_new_tokens=6, greedy=True)
    before = generate(engine, greedy)
    names = sorted(adapter.tensors)
    torn = {**adapter.tensors, names[-1]: torch.zeros(3, 3)}
    del torn[names[0]]
    with pytest.raises(ValueError) as error:
        asyncio.run(engine.update_adapter(attrs.evolve(adapter, tensors=torn), version=2))
    assert str(error.value) == (f"adapter 'policy' does not fit its config (r = 4): missing {names[0]}; "
                                f"wrong shape for {names[-1]}")
    assert engine.version == 1
    assert [g[0].logprobs for g in generate(engine, greedy)] == [g[0].logprobs for g in before]


def test_an_engine_built_for_full_weights_takes_no_adapter(plugin_host, model_dir):
    engine = make_engine(plugin_host, model_dir, None)
    adapter = LoraAdapter(POLICY_ADAPTER, {"r": 4}, {})
    with pytest.raises(RuntimeError, match="built for full weights"):
        asyncio.run(engine.update_adapter(adapter, version=1))
