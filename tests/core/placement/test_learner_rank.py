"""A rank's checkpoint of a model with tied embeddings (SmolLM2's) holds each weight once, as a
one-process ``save_pretrained`` does, and loads back to the same model."""

from __future__ import annotations

import torch
from safetensors.torch import load_file
from transformers import LlamaConfig, LlamaForCausalLM

from grpo_run.core.placement.learner_rank import without_tied_copies


def test_a_gathered_state_of_a_tied_model_saves_like_the_model_itself(tmp_path):
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=True)
    model = LlamaForCausalLM(config)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    gathered = {k: v.detach().clone() for k, v in model.state_dict().items()}  # as a sharded strategy gathers it
    assert "lm_head.weight" in gathered

    model.save_pretrained(tmp_path / "one", safe_serialization=True)
    model.save_pretrained(tmp_path / "rank", state_dict=without_tied_copies(model, gathered), safe_serialization=True)
    one, rank = load_file(tmp_path / "one" / "model.safetensors"), load_file(tmp_path / "rank" / "model.safetensors")
    assert rank.keys() == one.keys() and "lm_head.weight" not in rank
    assert all(torch.equal(rank[k], one[k]) for k in one)
    loaded = LlamaForCausalLM.from_pretrained(tmp_path / "rank")
    assert torch.equal(loaded.lm_head.weight, model.lm_head.weight)


def test_an_untied_model_keeps_every_weight():
    config = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=False)
    model = LlamaForCausalLM(config)
    state = model.state_dict()
    assert without_tied_copies(model, state).keys() == state.keys()
