"""Tiny Llama-style causal language models, randomly initialised, for the character tokenizer."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:  # imported when a model is built: `grpo-run check` reads TinyLlamaSize without them
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerBase


def _positive(instance: object, attribute: attrs.Attribute, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{attribute.name} must be a positive integer, got {value!r}")


@attrs.frozen
class TinyLlamaSize:
    """The shape of a tiny Llama model (defaults: ~0.8M parameters with the character vocab)."""

    hidden_size: int = attrs.field(default=128, validator=_positive)
    """Width of the residual stream."""
    num_layers: int = attrs.field(default=4, validator=_positive)
    """Number of decoder layers."""
    num_heads: int = attrs.field(default=4, validator=_positive)
    """Attention heads (no grouped KV). head_dim = hidden_size / num_heads; vLLM's CPU kernel
    needs head_dim >= 32."""
    intermediate_size: int = attrs.field(default=512, validator=_positive)
    """Width of the MLP."""
    max_position_embeddings: int = attrs.field(default=128, validator=_positive)
    """Longest sequence (prompt + completion) the model is built for."""

    @num_heads.validator
    def _divides_hidden(self, attribute: attrs.Attribute, value: int) -> None:
        if self.hidden_size % value:
            raise ValueError(f"num_heads ({value}) must divide hidden_size ({self.hidden_size})")


def tiny_llama_config(size: TinyLlamaSize, tokenizer: PreTrainedTokenizerBase) -> LlamaConfig:
    """A ``LlamaConfig`` of ``size`` whose vocabulary and special ids match ``tokenizer``."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=size.hidden_size,
        intermediate_size=size.intermediate_size,
        num_hidden_layers=size.num_layers,
        num_attention_heads=size.num_heads,
        num_key_value_heads=size.num_heads,
        max_position_embeddings=size.max_position_embeddings,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        initializer_range=0.02,
        rms_norm_eps=1e-5,
    )


def build_tiny_llama(size: TinyLlamaSize, tokenizer: PreTrainedTokenizerBase, seed: int) -> LlamaForCausalLM:
    """A randomly initialised fp32 tiny Llama for ``tokenizer``; the same ``seed`` gives the same weights."""
    import torch
    from transformers import GenerationConfig, LlamaForCausalLM

    config = tiny_llama_config(size, tokenizer)
    fork_devices: list[int] = []
    with torch.random.fork_rng(devices=fork_devices):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        do_sample=False,
    )
    return model.float()
