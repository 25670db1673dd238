"""The sizes a memory plan needs, read without loading weights.

:class:`ModelShape` comes from a model's ``config.json`` alone: the transformer's widths and
depth, and its parameter counts from the model built on torch's ``meta`` device (shapes only),
so every architecture transformers knows is counted exactly, tied embeddings once.
:class:`RolloutShape` is the largest rollout batch a config can produce.
"""

from __future__ import annotations

from typing import Any

import attrs


@attrs.frozen
class ModelShape:
    """A decoder-only transformer's sizes."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    params: int
    """Every parameter, shared ones once."""
    embedding_params: int
    """The input embedding's (and the output layer's when they are tied)."""
    linear_shapes: tuple[tuple[str, int, int], ...] = ()
    """``(module name, in features, out features)`` of every linear layer but the output layer (for LoRA)."""
    config: Any = attrs.field(default=None, eq=False, repr=False)
    """The transformers config it was read from."""

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @classmethod
    def from_config(cls, config: Any) -> ModelShape:
        """The shape of a causal LM of transformers ``config`` (built on the meta device: no memory)."""
        import torch
        from transformers import AutoModelForCausalLM

        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
        params = sum(p.numel() for p in model.parameters())
        embedding = model.get_input_embeddings().weight.numel()
        head = model.get_output_embeddings()
        linears = tuple(
            (name, m.in_features, m.out_features)
            for name, m in model.named_modules()
            if isinstance(m, torch.nn.Linear) and m is not head
        )
        heads = int(text.num_attention_heads)
        hidden = int(text.hidden_size)
        return cls(
            hidden=hidden,
            intermediate=int(getattr(text, "intermediate_size", 4 * hidden)),
            layers=int(text.num_hidden_layers),
            heads=heads,
            kv_heads=int(getattr(text, "num_key_value_heads", None) or heads),
            head_dim=int(getattr(text, "head_dim", None) or hidden // heads),
            vocab=int(text.vocab_size),
            params=params,
            embedding_params=embedding,
            linear_shapes=linears,
            config=config,
        )


@attrs.frozen
class RolloutShape:
    """A rollout batch: ``prompts`` groups of ``samples`` sequences of ``prompt_tokens`` +
    ``response_tokens`` tokens (the longest the config allows)."""

    prompts: int
    samples: int
    prompt_tokens: int
    response_tokens: int

    @property
    def sequences(self) -> int:
        return self.prompts * self.samples

    @property
    def tokens(self) -> int:
        """Tokens of every sequence whole (what the token budget counts)."""
        return self.sequences * (self.prompt_tokens + self.response_tokens)

    def stream_fraction(self, share_prompts: bool) -> float:
        """The fraction of :attr:`tokens` that pass through the layers: with prompt sharing a
        group's prompt is computed once."""
        if not share_prompts or self.samples == 1:
            return 1.0
        per_group = self.prompt_tokens + self.samples * self.response_tokens
        return per_group / (self.samples * (self.prompt_tokens + self.response_tokens))
