"""The hf generation engine: shapes, finish reasons, and engine log-probs that agree with the
learner's packed log-probs for the same tokens."""

from __future__ import annotations

import asyncio

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from grpo_run import EngineContext, SamplingParams
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
