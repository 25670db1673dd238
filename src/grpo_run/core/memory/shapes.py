"""The sizes a memory plan needs, read without loading weights.

:class:`ModelShape` comes from a model's ``config.json`` alone: the transformer's widths and
depth, and its parameter counts from the model built on torch's ``meta`` device (shapes only),
so every architecture transformers knows is counted exactly, tied embeddings once. A shape no
model has (a width of zero, a string, a trillion layers) is refused first, in one line, by
:func:`shape_problems`, which needs neither torch nor transformers.
:class:`RolloutShape` is the largest rollout batch a config can produce.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

LIMITS = {
    "hidden_size": 131_072, "intermediate_size": 1_048_576, "num_hidden_layers": 1_024,
    "num_attention_heads": 4_096, "num_key_value_heads": 4_096, "head_dim": 4_096, "vocab_size": 16_777_216,
    "max_position_embeddings": 1 << 30,
}
"""The largest value of each size a plan accepts: several times the largest published models'
(hidden 16,384 and 126 layers for Llama 3.1 405B, vocabularies of about 256k). Above these a
shape is a typo, and building it even on the meta device would take minutes."""
MAX_PARAMS = 10**13
"""Parameters at most (ten trillion): a larger count is refused before anything is built."""
REQUIRED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")


def text_fields(config: Any) -> Mapping[str, Any]:
    """The decoder's fields of a transformers config or a ``config.json`` dict (a multimodal
    model's ``text_config`` where it has one)."""
    if isinstance(config, Mapping):
        return config.get("text_config") or config
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return text.to_dict() if hasattr(text, "to_dict") else vars(text)


def shape_problems(config: Any) -> list[str]:
    """What makes ``config`` (a transformers config or its ``config.json`` as a dict) a shape no
    plan can count: a size that is missing, not a whole number, below 1 or absurdly large, or
    parameters beyond :data:`MAX_PARAMS`. Each problem is one line, ``"hidden_size = -128: ..."``."""
    fields = text_fields(config)
    problems = []
    for key, most in LIMITS.items():
        value = fields.get(key)
        if value is None:
            if key in REQUIRED:
                problems.append(f"{key}: missing")
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            problems.append(f"{key} = {value!r}: expected a whole number")
        elif value < 1:
            problems.append(f"{key} = {value}: must be at least 1")
        elif value > most:
            problems.append(f"{key} = {value:,}: more than any model has (at most {most:,})")
    if problems:
        return problems
    hidden, layers, vocab = fields["hidden_size"], fields["num_hidden_layers"], fields["vocab_size"]
    inter = fields.get("intermediate_size") or 4 * hidden
    rough = 2 * vocab * hidden + layers * (4 * hidden * hidden + 3 * hidden * inter)
    if rough > MAX_PARAMS:
        problems.append(f"about {rough:.1e} parameters (hidden_size {hidden:,}, num_hidden_layers {layers:,}, "
                        f"vocab_size {vocab:,}): more than any model has (at most {MAX_PARAMS:.0e})")
    return problems


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
    layer_params: int = 0
    """The largest decoder layer's parameters: what a sharded strategy gathers at once."""
    head_params: int = 0
    """The output layer's parameters (0 when tied to the embedding)."""
    context: int | None = None
    """``max_position_embeddings``: the longest sequence the model takes (``None``: not said)."""
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

    @property
    def root_params(self) -> int:
        """Parameters outside the decoder layers: the embedding, the output layer, the final norm."""
        return max(0, self.params - self.layers * self.layer_params)

    @classmethod
    def from_config(cls, config: Any, source: str = "the model") -> ModelShape:
        """The shape of a causal LM of transformers ``config`` (built on the meta device: no
        memory); a :class:`~grpo_run.UserError` naming ``source`` for a shape no model has."""
        import torch
        from transformers import AutoModelForCausalLM

        from grpo_run.core.errors import UserError

        problems = shape_problems(config)
        if problems:
            raise UserError(f"{source}: config.json: {problems[0]}")
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
        params = sum(p.numel() for p in model.parameters())
        embedding = model.get_input_embeddings().weight.numel()
        head = model.get_output_embeddings()
        layer_params = max((sum(p.numel() for p in m.parameters()) for m in _decoder_layers(model)), default=0)
        head_params = head.weight.numel() if head is not None and head.weight is not model.get_input_embeddings().weight else 0
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
            layer_params=layer_params,
            head_params=head_params,
            context=getattr(text, "max_position_embeddings", None),
            linear_shapes=linears,
            config=config,
        )


def _decoder_layers(model: Any) -> list[Any]:
    """The model's stack of decoder layers: the longest ``ModuleList`` of modules of one class."""
    import torch

    best: list[Any] = []
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) > len(best) and len({type(m) for m in module}) == 1:
            best = list(module)
    return best


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
