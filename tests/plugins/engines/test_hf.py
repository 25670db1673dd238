"""The hf generation engine: shapes, finish reasons, and engine log-probs that agree with the
learner's packed log-probs for the same tokens."""

from __future__ import annotations

import asyncio
import inspect

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from grpo_run import EngineContext, SamplingParams, cache_keyword
from grpo_run.core.learner.logprobs import packed_token_logprobs
from grpo_run.core.rollout.packing import SequenceToPack, pack_sequences


@pytest.fixture(scope="module")
def model_dir(plugin_host):
    source = plugin_host.registry.get("model", "tiny-random")
    return source(source.Config()).resolve()


@pytest.fixture(scope="module")
def engine(plugin_host, model_dir):
    tok = AutoTokenizer.from_pretrained(model_dir)
    cls = plugin_host.registry.get("engine", "hf")
    ctx = EngineContext(model_path=model_dir, tokenizer=tok, dtype=torch.float32, device="cpu", seed=3)
    return cls(cls.Config(), ctx)


def _prompts(engine):
    tok = engine.tokenizer
    texts = [tok.apply_chat_template([{"role": "user", "content": c}], add_generation_prompt=True, tokenize=False)
             for c in ("1+2", "30+41", "7")]
    return [tok(t, add_special_tokens=False)["input_ids"] for t in texts]


def test_n_completions_per_prompt_with_consistent_fields(engine):
    params = SamplingParams(n=4, max_new_tokens=6, temperature=1.0)
    out = asyncio.run(engine.generate(_prompts(engine), params))
    assert [len(group) for group in out] == [4, 4, 4]
    for comp in (c for group in out for c in group):
        assert 1 <= len(comp.token_ids) <= 6
        assert len(comp.logprobs) == len(comp.token_ids)
        assert all(lp <= 0.0 for lp in comp.logprobs)
        if comp.finish_reason == "stop":
            assert comp.token_ids[-1] == engine.eos_token_id
        else:
            assert comp.finish_reason == "length" and len(comp.token_ids) == 6
        assert comp.policy_version == engine.version


def test_greedy_is_deterministic(engine):
    params = SamplingParams(n=1, max_new_tokens=6, greedy=True)
    a = asyncio.run(engine.generate(_prompts(engine), params))
    b = asyncio.run(engine.generate(_prompts(engine), params))
    assert [c[0].token_ids for c in a] == [c[0].token_ids for c in b]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_engine_logprobs_match_learner_logprobs(engine, model_dir, temperature):
    prompts = _prompts(engine)
    out = asyncio.run(engine.generate(prompts, SamplingParams(n=3, max_new_tokens=8, temperature=temperature)))
    seqs, engine_lps = [], []
    for p, group in zip(prompts, out):
        for c in group:
            seqs.append(SequenceToPack(prompt_ids=list(p), completion_ids=list(c.token_ids), advantage=0.0,
                                       engine_logprobs=list(c.logprobs), seq_id=len(seqs)))
    batch = pack_sequences(seqs, pack_length=64, pad_token_id=engine.pad_token_id)
    learner_model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with torch.no_grad():
        learner = packed_token_logprobs(learner_model, batch, temperature=temperature)
    diff = (learner - batch.engine_logprobs)[batch.completion_mask].abs().max()
    assert diff < 1e-4, diff


def test_weight_update_changes_output_and_version(engine, model_dir):
    import asyncio as aio

    params = SamplingParams(n=1, max_new_tokens=6, greedy=True)
    before = aio.run(engine.generate(_prompts(engine), params))
    state = {k: v.clone() for k, v in engine.model.state_dict().items()}
    zeroed = {k: torch.zeros_like(v) if "lm_head" in k or "embed" in k else v for k, v in state.items()}
    aio.run(engine.update_weights(zeroed, version=7))
    after = aio.run(engine.generate(_prompts(engine), params))
    assert after[0][0].policy_version == 7
    assert [c[0].logprobs for c in before] != [c[0].logprobs for c in after]
    aio.run(engine.update_weights(state, version=8))  # leave the shared fixture as it was


def test_greedy_output_equals_plain_generate_token_for_token(engine, model_dir):
    """Prefilling each prompt once and repeating its cache changes no greedy token: the engine's
    output equals transformers' own ``generate`` fed every sample's prompt (left-padded)."""
    tok = engine.tokenizer
    texts = ["1+2", "30+41", "7", "12+3+4+5", "9+9"]
    prompts = [tok(tok.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True,
                                           tokenize=False), add_special_tokens=False)["input_ids"] for t in texts]
    n = 3
    out = engine.generate_sync(prompts, SamplingParams(n=n, max_new_tokens=12, greedy=True))
    flat = [p for p in prompts for _ in range(n)]
    width = max(map(len, flat))
    ids = torch.tensor([[engine.pad_token_id] * (width - len(p)) + p for p in flat])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in flat])
    reference = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        want = reference.generate(input_ids=ids, attention_mask=mask, max_new_tokens=12, do_sample=False,
                                  eos_token_id=engine.eos_token_id, pad_token_id=engine.pad_token_id)[:, width:]
    for row, comp in enumerate(c for group in out for c in group):
        expected = want[row].tolist()
        if engine.eos_token_id in expected:
            expected = expected[: expected.index(engine.eos_token_id) + 1]
        assert list(comp.token_ids) == expected, row


def test_sample_chunks_keep_a_prompts_samples_together():
    from grpo_run.plugins.engines.hf import sample_chunks

    assert sample_chunks(3, 4, 8) == [[(0, 4), (1, 4)], [(2, 4)]]
    assert sample_chunks(2, 3, 8) == [[(0, 3), (1, 3)]]
    # More samples than fit in one call: the prompt's samples are split, calls are filled.
    assert sample_chunks(2, 5, 4) == [[(0, 4)], [(0, 1), (1, 3)], [(1, 2)]]
    for num_prompts, n, size in [(16, 8, 256), (5, 7, 10), (1, 1, 1)]:
        chunks = sample_chunks(num_prompts, n, size)
        assert all(sum(k for _, k in c) <= size for c in chunks)
        totals = [0] * num_prompts
        for c in chunks:
            for i, k in c:
                totals[i] += k
        assert totals == [n] * num_prompts


def test_generation_threads_are_set_per_call_and_restored(engine):
    before = torch.get_num_threads()
    seen = []
    original = engine.model.generate

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return original(*args, **kwargs)

    engine.model.generate = spy
    try:
        engine.generate_sync(_prompts(engine)[:1], SamplingParams(n=1, max_new_tokens=2, greedy=True))
    finally:
        del engine.model.generate
    assert seen == [engine.num_threads] and torch.get_num_threads() == before
    assert engine.num_threads == before  # generation runs alone: every thread


def test_an_engine_beside_the_learner_leaves_it_half_the_threads(plugin_host, model_dir):
    cls = plugin_host.registry.get("engine", "hf")
    tok = AutoTokenizer.from_pretrained(model_dir)
    ctx = EngineContext(model_path=model_dir, tokenizer=tok, dtype=torch.float32, device="cpu", seed=3,
                        overlaps_learner=True)
    before = torch.get_num_threads()
    assert cls(cls.Config(), ctx).num_threads == max(1, before // 2)
    assert cls(cls.Config(num_threads=3), ctx).num_threads == 3


def test_identical_prompts_are_prefilled_once_and_sample_as_copies(engine, monkeypatch):
    """The G episodes of a group each ask for their opening turn as a prompt of its own (n = 1):
    the engine prefills that prompt once, and draws exactly what ``n = G`` of it would draw."""
    a, b = _prompts(engine)[:2]
    rows: list[int] = []
    prefill = engine._prefill

    def counting(input_ids, attention, expand):
        rows.append(input_ids.shape[0])
        return prefill(input_ids, attention, expand)

    monkeypatch.setattr(engine, "_prefill", counting)
    params = SamplingParams(n=1, max_new_tokens=8, temperature=1.0, seed=11)
    repeated = engine.generate_sync([a, a, a, b, b, b], params)
    assert rows == [2]
    copies = engine.generate_sync([a, b], SamplingParams(n=3, max_new_tokens=8, temperature=1.0, seed=11))
    assert [c[0].token_ids for c in repeated] == [c.token_ids for group in copies for c in group]
    assert [c[0].logprobs for c in repeated] == [c.logprobs for group in copies for c in group]


def test_the_prefill_fills_the_cache_under_the_keyword_the_installed_transformers_takes(engine):
    """transformers 5.24 renamed the KV-cache keyword (``past_key_values`` -> ``cache``); a model's
    forward swallows an unknown keyword in ``**kwargs``, so a wrong guess leaves the cache empty."""
    keyword = cache_keyword()
    assert keyword in inspect.signature(type(engine.model).forward).parameters
    prompt = _prompts(engine)[1]
    ids = torch.tensor([prompt])
    cache = engine._prefill(ids, torch.ones_like(ids), torch.tensor([0, 0, 0]))
    assert cache.get_seq_length() == len(prompt) - 1
    assert cache.layers[0].keys.shape[0] == 3  # repeated to the three samples
