"""The hf engine serving a sweep (``ServesAdapters``, ``BatchesRequests``): several requests, each
with its own adapter, seed and sample count, in shared sampling calls, each getting exactly what it
gets alone; each adapter's own version on its completions; a request naming an adapter not loaded
yet sampling from the base model; DoRA adapters, which peft cannot mix in one forward, in calls
of their own."""

from __future__ import annotations

import asyncio

import attrs
import pytest
import torch
from transformers import AutoTokenizer

from grpo_run import AdapterSlots, BatchesRequests, EngineContext, SamplingParams, ServesAdapters
from support.adapters import trained_adapter

peft = pytest.importorskip("peft", reason="LoRA needs the peft extra (pip install 'grpo-run[peft]')")


@pytest.fixture(scope="module")
def model_dir(plugin_host):
    source = plugin_host.registry.get("model", "tiny-arithmetic")
    return source(source.Config()).resolve()


def make_engine(plugin_host, model_dir, adapters, **options):
    cls = plugin_host.registry.get("engine", "hf")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    return cls(cls.Config(**options), EngineContext(model_path=model_dir, tokenizer=tokenizer, dtype=torch.float32,
                                                    device="cpu", seed=3, adapters=adapters))


def prompts(engine, count=6):
    tok = engine.tokenizer
    texts = [tok.apply_chat_template([{"role": "user", "content": f"{i}+{3 * i + 1}"}], add_generation_prompt=True,
                                     tokenize=False) for i in range(count)]
    return [tok(t, add_special_tokens=False)["input_ids"] for t in texts]


def tokens(groups):
    return [[c.token_ids for c in group] for group in groups]


def load(engine, model_dir, name, seed, version, **kwargs):
    adapter, _ = trained_adapter(model_dir, seed=seed, scale=0.3, **kwargs)
    asyncio.run(engine.update_adapter(attrs.evolve(adapter, name=name), version))


@pytest.mark.parametrize("max_batch_size", [256, 10])  # one call for all, or several per request
def test_requests_batched_together_get_what_each_gets_alone(plugin_host, model_dir, max_batch_size):
    cls = plugin_host.registry.get("engine", "hf")
    assert isinstance(cls, ServesAdapters) and isinstance(cls, BatchesRequests)
    engine = make_engine(plugin_host, model_dir, AdapterSlots(max_rank=8, count=3), max_batch_size=max_batch_size)
    load(engine, model_dir, "first", seed=1, version=3)
    load(engine, model_dir, "second", seed=2, version=5, r=8, target_modules=["q_proj", "v_proj"])
    ask = prompts(engine)
    requests = [
        (ask, SamplingParams(n=4, max_new_tokens=8, temperature=1.0, seed=11, adapter="first")),
        (ask[:4], SamplingParams(n=3, max_new_tokens=8, temperature=1.0, seed=12, adapter="second")),
        (ask, SamplingParams(n=2, max_new_tokens=8, temperature=1.0, seed=13, adapter="third")),  # not loaded yet
        (ask[2:], SamplingParams(n=1, max_new_tokens=8, greedy=True, seed=14, adapter="first")),  # settings of its own
    ]
    alone = [engine.generate_sync(p, params) for p, params in requests]
    together = asyncio.run(engine.generate_batch(requests))

    assert [tokens(g) for g in together] == [tokens(g) for g in alone]
    for ours, theirs in zip(together, alone):
        for a, b in zip((c for g in ours for c in g), (c for g in theirs for c in g)):
            torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), rtol=0, atol=1e-5)
    versions = [{c.policy_version for g in groups for c in g} for groups in together]
    assert versions == [{3}, {5}, {0}, {3}]
    # The adapters matter (a request's completions are not the base model's), and "third" is the base model.
    base = make_engine(plugin_host, model_dir, None, max_batch_size=max_batch_size)
    assert tokens(together[2]) == tokens(base.generate_sync(ask, attrs.evolve(requests[2][1], adapter=None)))
    assert tokens(together[0]) != tokens(base.generate_sync(ask, attrs.evolve(requests[0][1], adapter=None)))


def test_dora_adapters_are_not_mixed_in_one_forward_and_still_get_what_they_get_alone(plugin_host, model_dir):
    engine = make_engine(plugin_host, model_dir, AdapterSlots(max_rank=4, count=2))
    load(engine, model_dir, "first", seed=1, version=1, use_dora=True)
    load(engine, model_dir, "second", seed=2, version=1)
    ask = prompts(engine)
    requests = [(ask, SamplingParams(n=3, max_new_tokens=6, temperature=1.0, seed=21, adapter=name))
                for name in ("first", "second")]
    alone = [engine.generate_sync(p, params) for p, params in requests]
    assert [tokens(g) for g in asyncio.run(engine.generate_batch(requests))] == [tokens(g) for g in alone]
