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
from grpo_run.plugins.engines import hf_decode


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
    original = engine.model.forward

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return original(*args, **kwargs)

    engine.model.forward = spy
    try:
        engine.generate_sync(_prompts(engine)[:1], SamplingParams(n=1, max_new_tokens=2, greedy=True))
    finally:
        del engine.model.forward
    assert seen == [engine.num_threads] * 2 and torch.get_num_threads() == before  # prefill, one decode step
    assert engine.num_threads == before  # generation runs alone: every thread


def test_an_engine_beside_the_learner_leaves_it_half_the_threads(plugin_host, model_dir):
    cls = plugin_host.registry.get("engine", "hf")
    tok = AutoTokenizer.from_pretrained(model_dir)
    ctx = EngineContext(model_path=model_dir, tokenizer=tok, dtype=torch.float32, device="cpu", seed=3,
                        overlaps_learner=True)
    before = torch.get_num_threads()
    assert cls(cls.Config(), ctx).num_threads == max(1, before // 2)
    assert cls(cls.Config(num_threads=3), ctx).num_threads == 3


def _forward_inputs(model, monkeypatch) -> list[tuple[int, ...]]:
    """The shape of ``input_ids`` in every forward of ``model`` from now on (what it computes)."""
    shapes: list[tuple[int, ...]] = []
    original = model.forward

    def counting(*args, **kwargs):
        shapes.append(tuple(kwargs["input_ids"].shape))
        return original(*args, **kwargs)

    monkeypatch.setattr(model, "forward", counting)
    return shapes


def test_a_prompt_is_computed_once_for_all_its_samples(engine, monkeypatch):
    """Counted, not timed: the distinct prompts of a call go through the model once, every token
    of them (the last one too), and each later forward feeds one new token per sample. Before,
    the last prompt token ran once per sample (``generate`` continued from a cache of all but it),
    and each call made one forward more."""
    prompts = _prompts(engine)
    shapes = _forward_inputs(engine.model, monkeypatch)
    steps = 6
    out = engine.generate_sync(prompts, SamplingParams(n=4, max_new_tokens=steps, greedy=True))
    width = max(map(len, prompts))
    longest = max(len(c.token_ids) for group in out for c in group)
    assert shapes[0] == (len(prompts), width)  # 3 prompts, not 12 samples
    assert all(rows <= 4 * len(prompts) and new == 1 for rows, new in shapes[1:])
    assert len(shapes) == longest  # the prefill gives the first token; the last token drawn is not fed


def test_identical_prompts_are_prefilled_once_and_sample_as_copies(engine, monkeypatch):
    """The G episodes of a group each ask for their opening turn as a prompt of its own (n = 1):
    the engine prefills that prompt once, and draws exactly what ``n = G`` of it would draw."""
    a, b = _prompts(engine)[:2]
    shapes = _forward_inputs(engine.model, monkeypatch)
    params = SamplingParams(n=1, max_new_tokens=8, temperature=1.0, seed=11)
    repeated = engine.generate_sync([a, a, a, b, b, b], params)
    assert shapes[0] == (2, max(len(a), len(b)))
    copies = engine.generate_sync([a, b], SamplingParams(n=3, max_new_tokens=8, temperature=1.0, seed=11))
    assert [c[0].token_ids for c in repeated] == [c.token_ids for group in copies for c in group]
    assert [c[0].logprobs for c in repeated] == [c.logprobs for group in copies for c in group]


def _transformers_generate(engine, prompts, params):
    """transformers' own greedy ``generate`` for ``params.n`` copies of each prompt fed to it
    left-padded (stopping at ``params.stop_strings``): token ids and each step's log-probs."""
    from transformers import GenerationConfig

    assert params.greedy
    flat = [p for p in prompts for _ in range(params.n)]
    width = max(map(len, flat))
    ids = torch.tensor([[engine.pad_token_id] * (width - len(p)) + p for p in flat])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in flat])
    extra = dict(stop_strings=list(params.stop_strings), tokenizer=engine.tokenizer) if params.stop_strings else {}
    with torch.inference_mode():
        out = engine.model.generate(
            input_ids=ids, attention_mask=mask, generation_config=GenerationConfig(), do_sample=False,
            max_new_tokens=params.max_new_tokens, eos_token_id=engine.eos_token_id, pad_token_id=engine.pad_token_id,
            return_dict_in_generate=True, output_logits=True, **extra,
        )
    logits = torch.stack(out.logits, 1).float()
    tokens = out.sequences[:, width:]
    return tokens, logits.gather(-1, tokens[..., None]).squeeze(-1) - torch.logsumexp(logits, -1)


def _teacher_forced_logprobs(model, prompt, completion, temperature):
    """Log-probs of ``completion`` after ``prompt`` from one forward of the whole sequence (no
    cache, no padding): what the engine's decode steps must reproduce."""
    ids = torch.tensor([list(prompt) + list(completion)])
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float() / temperature
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(completion)[:, None]).squeeze(-1)


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_rows_leaving_the_forward_change_no_draw(engine, temperature, top_p, monkeypatch):
    """Finished rows leave the forward (their KV buffers compacted); every row still draws at every
    step, so a seeded call gives the same tokens whether rows were compacted each time one finished
    or never. Each completion's log-probs are those of one forward over prompt + completion."""
    prompts = _prompts(engine)
    params = SamplingParams(n=8, max_new_tokens=48, temperature=temperature, top_p=top_p, seed=11)
    runs = []
    for fraction in (1 << 20, 0):  # compact at every finished row / never
        monkeypatch.setattr(hf_decode, "COMPACT_FRACTION", fraction)
        runs.append([c for group in engine.generate_sync(prompts, params) for c in group])
    compacted, whole = runs
    assert any(c.finish_reason == "stop" and len(c.token_ids) < params.max_new_tokens - 1 for c in compacted)
    assert [c.token_ids for c in compacted] == [c.token_ids for c in whole]
    for row, comp in enumerate(compacted):
        prompt = prompts[row // params.n]
        expected = _teacher_forced_logprobs(engine.model, prompt, comp.token_ids, temperature)
        assert torch.allclose(torch.tensor(comp.logprobs), expected, atol=1e-4), row


def test_inverse_cdf_draws_each_token_with_its_probability():
    """20,000 draws of a 6-token distribution: each frequency within 4.5 standard deviations of its
    probability, and the zero-probability tokens (first, middle, last) never drawn."""
    probs = torch.tensor([0.0, 0.5, 0.3, 0.0, 0.15, 0.05, 0.0]).repeat(20_000, 1)
    torch.manual_seed(0)
    drawn = hf_decode.inverse_cdf(probs)
    counts = torch.bincount(drawn, minlength=7).double()
    p = probs[0].double()
    assert counts[p == 0].sum() == 0
    sigma = (20_000 * p * (1 - p)).sqrt()
    assert ((counts - 20_000 * p).abs() <= 4.5 * sigma).all(), counts


def test_a_stop_string_ends_a_completion_where_generate_ends_it(engine):
    prompts = _prompts(engine)
    out = engine.generate_sync(prompts, SamplingParams(n=1, max_new_tokens=24, greedy=True))
    texts = [group[0].text for group in out]
    stop = next(t[2:4] for t in texts if len(t) >= 6)  # two characters a greedy completion emits
    params = SamplingParams(n=2, max_new_tokens=24, greedy=True, stop_strings=(stop,), seed=3)
    stopped = [c for group in engine.generate_sync(prompts, params) for c in group]
    tokens, _ = _transformers_generate(engine, prompts, params)
    assert any(c.finish_reason == "stop" and c.text.endswith(stop) for c in stopped)
    for row, comp in enumerate(stopped):
        assert list(comp.token_ids) == tokens[row, : len(comp.token_ids)].tolist(), row
        if comp.finish_reason == "stop" and engine.eos_token_id not in comp.token_ids:
            assert comp.text.endswith(stop) and stop not in comp.text[:-1]


def _model_engine(plugin_host, tmp_path, config, attn_implementation="sdpa"):
    from grpo_run.plugins.models.char_tokenizer import build_char_tokenizer

    tokenizer = build_char_tokenizer(model_max_length=128)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    cls = plugin_host.registry.get("engine", "hf")
    ctx = EngineContext(model_path=str(tmp_path), tokenizer=AutoTokenizer.from_pretrained(tmp_path), dtype=torch.float32,
                        device="cpu", seed=3, attn_implementation=attn_implementation)
    return cls(cls.Config(), ctx)


@pytest.mark.parametrize("kind", ["grouped-query heads", "eager attention", "sliding window"])
def test_other_attention_layouts_decode_as_one_forward_does(plugin_host, tmp_path, kind, monkeypatch):
    """Grouped-query heads and eager attention run on the reserved buffers; a sliding window (5
    tokens, shorter than the prompts) keeps transformers' own cache layers, its rows compacted with
    their ``batch_select_indices``. Greedy: ``generate``'s tokens; sampled: each completion's
    log-probs are those of one forward over prompt + completion."""
    from transformers import LlamaConfig, MistralConfig

    from grpo_run.plugins.models.char_tokenizer import build_char_tokenizer

    vocab = len(build_char_tokenizer(model_max_length=128))
    shape = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=128, eos_token_id=1, pad_token_id=0)
    config = MistralConfig(sliding_window=5, **shape) if kind == "sliding window" else LlamaConfig(**shape)
    engine = _model_engine(plugin_host, tmp_path, config, "eager" if kind == "eager attention" else "sdpa")
    monkeypatch.setattr(hf_decode, "COMPACT_FRACTION", 1 << 20)
    plain: list[bool] = []  # per call: whether the reserved buffers served
    check = hf_decode._plain_layers

    def recorded(cache):
        plain.append(check(cache))
        return plain[-1]

    monkeypatch.setattr(hf_decode, "_plain_layers", recorded)
    prompts = _prompts(engine)
    greedy = SamplingParams(n=2, max_new_tokens=16, greedy=True, seed=5)
    out = [c for group in engine.generate_sync(prompts, greedy) for c in group]
    tokens, logprobs = _transformers_generate(engine, prompts, greedy)
    for row, comp in enumerate(out):
        k = len(comp.token_ids)
        assert list(comp.token_ids) == tokens[row, :k].tolist(), row
        assert torch.allclose(torch.tensor(comp.logprobs), logprobs[row, :k], atol=1e-5), row
    sampled = SamplingParams(n=4, max_new_tokens=32, temperature=1.0, seed=5)
    for row, comp in enumerate(c for group in engine.generate_sync(prompts, sampled) for c in group):
        expected = _teacher_forced_logprobs(engine.model, prompts[row // sampled.n], comp.token_ids, 1.0)
        assert torch.allclose(torch.tensor(comp.logprobs), expected, atol=1e-4), row
    assert plain == [kind != "sliding window"] * 2


def test_the_cache_reaches_the_model_under_the_keyword_the_installed_transformers_takes(engine):
    """transformers 5.24 renamed the KV-cache keyword (``past_key_values`` -> ``cache``); a model's
    forward swallows an unknown keyword in ``**kwargs``, so a wrong guess would leave the cache
    empty (and every decode step would see one token)."""
    assert cache_keyword() in inspect.signature(type(engine.model).forward).parameters
