"""The character tokenizer, the tiny Llama builder and the built-in model sources."""

from __future__ import annotations

import os

import attrs
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from grpo_run.plugins.models.char_tokenizer import CHARACTERS, SPECIAL_TOKENS, build_char_tokenizer
from grpo_run.plugins.models.sources import TinyArithmeticModel, TinyRandomConfig, TinyRandomModel
from grpo_run.plugins.models.tiny_llama import TinyLlamaSize, build_tiny_llama
from grpo_run.plugins.tasks.arithmetic import ArithmeticConfig, ArithmeticTask

torch.set_num_threads(min(2, torch.get_num_threads()))

SMALL = TinyRandomConfig(hidden_size=64, num_layers=1, num_heads=2, intermediate_size=64, max_position_embeddings=32)


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer()


# ---------------------------------------------------------------- tokenizer


def test_special_token_ids(tok):
    assert (tok.pad_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 4)
    assert tok.convert_tokens_to_ids(["<|user|>", "<|assistant|>"]) == [2, 3]
    assert tok.bos_token is None
    assert len(tok) == len(SPECIAL_TOKENS) + len(CHARACTERS)
    assert tok.padding_side == "left"


def test_one_token_per_character_round_trip(tok):
    text = "Hello, World! 12+7=19? (a-b)*c/d: 'x' \"y\".\nnext"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text)
    assert tok.decode(ids) == text
    assert tok.convert_ids_to_tokens(ids[:3]) == ["H", "e", "l"]


def test_unknown_character_maps_to_unk(tok):
    assert tok("1~2", add_special_tokens=False)["input_ids"] == [6, tok.unk_token_id, 7]


def test_chat_template_strings(tok):
    prompt = [{"role": "user", "content": "12+7"}]
    assert tok.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False) == "<|user|>12+7<|assistant|>"
    full = prompt + [{"role": "assistant", "content": "19"}]
    assert tok.apply_chat_template(full, tokenize=False) == "<|user|>12+7<|assistant|>19<|eos|>"
    ids = tok.apply_chat_template(prompt, add_generation_prompt=True)["input_ids"]
    assert ids == [2, 6, 7, 15, 12, 3]


def test_decode_skips_special_tokens_without_spaces(tok):
    generated = tok("<|user|>3+4<|assistant|>7<|eos|><|pad|>", add_special_tokens=False)["input_ids"]
    assert tok.decode(generated, skip_special_tokens=True) == "3+47"
    assert tok.decode(generated[-3:], skip_special_tokens=True) == "7"


def test_left_padding(tok):
    batch = tok(["1+1", "12+34"], padding=True, add_special_tokens=False)
    assert batch["input_ids"][0][:2] == [tok.pad_token_id] * 2
    assert batch["attention_mask"][0] == [0, 0, 1, 1, 1]


def test_save_and_reload_offline(tok, tmp_path):
    tok.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    assert loaded.get_vocab() == tok.get_vocab()
    assert loaded.padding_side == "left"
    assert (loaded.pad_token_id, loaded.eos_token_id) == (0, 1)
    text = "<|user|>98+76<|assistant|>174<|eos|>"
    assert loaded(text)["input_ids"] == tok(text)["input_ids"]
    messages = [{"role": "user", "content": "5+5"}]
    assert loaded.apply_chat_template(messages, add_generation_prompt=True, tokenize=False) == "<|user|>5+5<|assistant|>"


# ---------------------------------------------------------------- model


def test_tiny_llama_shape_and_seed(tok):
    size = TinyLlamaSize(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128)
    model = build_tiny_llama(size, tok, seed=7)
    config = model.config
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (64, 2, 2)
    assert config.vocab_size == len(tok) and config.tie_word_embeddings
    assert (config.eos_token_id, config.pad_token_id) == (1, 0)
    assert model.generation_config.eos_token_id == 1 and model.generation_config.pad_token_id == 0
    again = build_tiny_llama(size, tok, seed=7)
    other = build_tiny_llama(size, tok, seed=8)
    weight = model.model.embed_tokens.weight
    assert torch.equal(weight, again.model.embed_tokens.weight)
    assert not torch.equal(weight, other.model.embed_tokens.weight)


def test_size_rejects_heads_not_dividing_hidden():
    with pytest.raises(ValueError, match="must divide"):
        TinyRandomConfig(hidden_size=130, num_heads=4)
    with pytest.raises(ValueError, match="positive"):
        TinyRandomConfig(num_layers=0)


# ---------------------------------------------------------------- model sources


def test_tiny_random_builds_loadable_dir_and_caches(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_RUN_CACHE", str(tmp_path))
    source = TinyRandomModel(SMALL)
    path = source.resolve()
    assert path.startswith(str(tmp_path / "models" / "tiny-random-"))
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    assert model.config.hidden_size == 64 and model.dtype == torch.float32
    assert model.config.vocab_size == len(tok)
    assert tok.model_max_length == 32
    # Second call: same directory, not rebuilt.
    mtime = os.stat(os.path.join(path, "model.safetensors")).st_mtime_ns
    assert TinyRandomModel(SMALL).resolve() == path
    assert os.stat(os.path.join(path, "model.safetensors")).st_mtime_ns == mtime
    assert TinyRandomModel(attrs.evolve(SMALL, seed=1)).resolve() != path
    assert [p.name for p in (tmp_path / "models").iterdir() if p.name.startswith(".")] == []


def test_tiny_arithmetic_generates_digits_then_eos():
    path = TinyArithmeticModel(TinyArithmeticModel.Config()).resolve()
    assert os.path.getsize(os.path.join(path, "model.safetensors")) < 10 * 2**20
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True).eval()
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    assert model.dtype == torch.float32
    rows = ArithmeticTask(ArithmeticConfig(max_operand=49)).eval_rows()[:8]
    prompts = [tok.apply_chat_template(r["messages"], add_generation_prompt=True, tokenize=False) for r in rows]
    batch = tok(prompts, padding=True, add_special_tokens=False, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=6, do_sample=False)
    for row, seq in zip(rows, out[:, batch["input_ids"].shape[1] :].tolist()):
        assert tok.eos_token_id in seq, row
        answer = tok.decode(seq[: seq.index(tok.eos_token_id)])
        assert answer.isdigit() and 1 <= len(answer) <= 3, (row, answer)
