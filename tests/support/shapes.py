"""Small random models in the shape of real ones, for runs that must look like them."""

from __future__ import annotations

from pathlib import Path


def smollm2_shaped(directory: Path) -> Path:
    """SmolLM2-135M's layer shape at a third of its width and with 2 of its 30 layers: grouped-query
    attention (3 query heads per key-value head, head size 64), an MLP 8/3 as wide, tied
    embeddings, its RoPE base; random weights (seed 0), the character tokenizer. Saved in
    ``directory`` (Hugging Face format), which is returned."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from grpo_run.plugins.models.char_tokenizer import build_char_tokenizer

    tokenizer = build_char_tokenizer(model_max_length=64)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=192, intermediate_size=512, num_hidden_layers=2,
        num_attention_heads=3, num_key_value_heads=1, head_dim=64, max_position_embeddings=64,
        tie_word_embeddings=True, rope_theta=100000.0, rms_norm_eps=1e-5,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LlamaForCausalLM(config)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
