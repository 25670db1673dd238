"""The hf engine's sampling loop: one prefill per distinct prompt, then decode steps for its samples.

transformers' ``generate`` did this before; the loop is ours because, on a CPU, these cost more
than the model's matmuls:

- **The KV cache.** ``generate``'s ``DynamicCache`` concatenates every layer's keys and values
  with the new position at each step, copying the whole cache; at one thread that ``cat`` was half
  of a bench-small call's CPU time (16 prompts x 8 samples x 32 tokens). Here each layer writes
  into buffers reserved for the whole call (:func:`reserved_layer_class`) and attention reads
  views of the filled part.
- **The draw.** ``torch.multinomial`` (``generate``'s) draws an exponential variate per vocabulary
  entry and sample, ~70 ns each on one thread: 250 ms per step for 64 samples of SmolLM2's 49,152
  tokens, more than the model's forward. :func:`inverse_cdf` draws one uniform number per sample.
- **The prompt.** Each distinct prompt is computed once, its last token included, and its cache
  and last logits are repeated to its samples (``generate`` ran the last prompt token for every
  sample).
- **Finished rows.** A row that emitted EOS or a stop string leaves the forward (the buffers
  are compacted when an eighth of their rows has finished); ``generate`` runs every row to the end.
- **Log-probs** are taken at each step; no ``[steps, B, V]`` logits are kept.

What is drawn comes from the distribution ``generate`` drew from: the same float32 logits,
transformers' own temperature and top-p warpers in ``generate``'s order, then ``softmax``. Greedy
is the argmax of the logits, token for token what ``generate`` gives; sampled tokens are other
draws from that distribution than ``generate``'s for the same seed (the random numbers are used
differently). Every row of the call draws at every step (a finished row from its last logits, and
is padded, as in ``generate``), so which rows are still in the forward changes no draw. Stop
strings use transformers' ``StopStringCriteria``. The model builds its own attention masks from a
2D mask at every step, as under ``generate`` (a ready 4D mask saved nothing measurable on
bench-small). Models whose cache is not one plain ``DynamicLayer`` per layer (sliding windows,
linear attention) keep transformers' own cache layers.

One call may hold several requests (a sweep's variants, :mod:`.hf_batches`): each block of rows
draws from a generator of its own (:class:`RowDraws`), so a request's completions are those it
gets alone for the same seed, and each row may name its LoRA adapter (peft's ``adapter_names``).
"""

from __future__ import annotations

import functools
import inspect
from typing import TYPE_CHECKING, Any

from grpo_run import SamplingParams, cache_keyword

if TYPE_CHECKING:
    import torch

COMPACT_FRACTION = 8
"""Rows still in the forward are compacted once at least 1 / this of them have finished."""


class RowDraws:
    """Where the rows of a sampling call get their random numbers: consecutive blocks of rows,
    each drawing from a ``torch.Generator`` of its own (one per request in a batch of several);
    ``None``: every row from torch's global generator."""

    def __init__(self, blocks: list[tuple[int, torch.Generator]] | None = None) -> None:
        self.blocks = blocks

    def uniform(self, rows: int, device: torch.device) -> torch.Tensor:
        """``[rows, 1]`` float64 numbers in ``[0, 1)``, each block's from its generator."""
        import torch

        if self.blocks is None:
            return torch.rand((rows, 1), dtype=torch.float64, device=device)
        parts = [torch.rand((n, 1), dtype=torch.float64, device=device, generator=g) for n, g in self.blocks]
        return parts[0] if len(parts) == 1 else torch.cat(parts)


def sample(
    model: Any, input_ids: torch.Tensor, attention: torch.Tensor, owners: torch.Tensor, params: SamplingParams,
    *, pad_token_id: int, eos_token_id: int | None, tokenizer: Any = None, draws: RowDraws | None = None,
    adapters: list[str] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """New tokens ``[B, T]`` (``pad_token_id`` after a row's end) and their log-probs ``[B, T]``
    (float32, under the sampling temperature, without top-p renormalisation: what the learner
    recomputes) for ``B = len(owners)`` samples; sample ``b`` continues prompt ``owners[b]`` of the
    left-padded distinct prompts ``input_ids`` / ``attention`` ``[P, W]``. ``draws``: the rows'
    random numbers (default: torch's global generator). ``adapters``: the LoRA adapter of each
    distinct prompt (peft's ``adapter_names``; ``model`` is then the ``PeftModel``)."""
    import torch
    from transformers import DynamicCache

    draws = draws or RowDraws()
    width, steps = input_ids.shape[1], params.max_new_tokens
    positions = (attention.cumsum(-1) - 1).masked_fill(attention == 0, 1)  # generate's rule for left padding
    prefill = DynamicCache(config=model.config)
    named = {"adapter_names": adapters} if adapters is not None else {}
    out = model(input_ids=input_ids, attention_mask=attention, position_ids=positions, use_cache=True,
                **{cache_keyword(): prefill}, **_last_logits_only(model), **named)
    logits = out.logits[:, -1].float()[owners]
    del out
    row_adapters = [adapters[o] for o in owners.tolist()] if adapters is not None else None
    running = _Running(model, prefill, attention, positions, owners, steps, row_adapters)
    batch = len(owners)
    sequences = torch.full((batch, width + steps), pad_token_id, dtype=torch.long, device=input_ids.device)
    sequences[:, :width] = input_ids[owners]
    tokens = torch.full((batch, steps), pad_token_id, dtype=torch.long, device=input_ids.device)
    logprobs = torch.zeros((batch, steps), dtype=torch.float32, device=input_ids.device)
    unfinished = torch.ones(batch, dtype=torch.bool, device=input_ids.device)
    stop = _stop_strings(tokenizer, params.stop_strings)
    for t in range(steps):
        chosen, chosen_logprobs = _draw(logits, params, sequences[:, : width + t], draws)
        chosen = torch.where(unfinished, chosen, pad_token_id)
        tokens[:, t], logprobs[:, t], sequences[:, width + t] = chosen, chosen_logprobs, chosen
        if eos_token_id is not None:
            unfinished &= chosen != eos_token_id
        if stop is not None:
            unfinished &= ~stop(sequences[:, : width + t + 1], None)
        if t == steps - 1 or not bool(unfinished.any()):
            return tokens[:, : t + 1], logprobs[:, : t + 1]
        running.drop_finished(unfinished)
        fresh = running.forward(model, chosen, t)
        logits = fresh if len(fresh) == batch else logits.index_copy_(0, running.rows, fresh)
    return tokens, logprobs


def _draw(logits: torch.Tensor, params: SamplingParams, sequences: torch.Tensor,
          draws: RowDraws) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row of ``[B, V]`` logits and its log-prob under the temperature."""
    import torch

    if params.greedy:
        chosen = logits.argmax(-1)
        return chosen, torch.log_softmax(logits, dim=-1).gather(-1, chosen[:, None]).squeeze(-1)
    z = logits / params.temperature if params.temperature != 1.0 else logits
    if params.top_p < 1.0:  # the log-prob stays the one before top-p's renormalisation
        from transformers import TopPLogitsWarper

        probs = torch.softmax(TopPLogitsWarper(top_p=params.top_p)(sequences, z), dim=-1)
        chosen = inverse_cdf(probs, draws)
        return chosen, z.gather(-1, chosen[:, None]).squeeze(-1) - torch.logsumexp(z, dim=-1)
    probs = torch.softmax(z, dim=-1)
    chosen = inverse_cdf(probs, draws)
    return chosen, probs.gather(-1, chosen[:, None]).squeeze(-1).log()


def inverse_cdf(probs: torch.Tensor, draws: RowDraws | None = None) -> torch.Tensor:
    """One draw per row of ``[B, V]`` probabilities from one uniform number per row: the first
    token whose cumulative probability (float64) reaches it. ``torch.multinomial`` draws an
    exponential variate for every entry instead (``argmax(probs / q)``). A token of probability 0
    is never drawn: the uniform number is in ``(0, total]``. ``draws``: where the uniform numbers
    come from (default: torch's global generator)."""
    import torch

    cdf = probs.double().cumsum(-1)
    u = (1.0 - (draws or RowDraws()).uniform(len(probs), probs.device)) * cdf[:, -1:]
    return torch.searchsorted(cdf, u).squeeze(1).clamp_(max=probs.shape[-1] - 1)


class _Running:
    """The rows still in the forward: their KV cache, attention mask and next position."""

    def __init__(self, model: Any, prefill: Any, attention: torch.Tensor, positions: torch.Tensor,
                 owners: torch.Tensor, steps: int, adapters: list[str] | None = None) -> None:
        import torch

        self.adapters = adapters
        """Each sample's LoRA adapter (peft's ``adapter_names``), or ``None``."""
        self.width = attention.shape[1]
        self.rows = torch.arange(len(owners), device=owners.device)
        """The sample each row of the forward holds."""
        self.next_position = positions[owners, -1] + 1
        capacity = self.width + steps - 1  # the last token drawn is never fed back
        self.mask = torch.ones((len(owners), capacity), dtype=torch.long, device=owners.device)
        self.mask[:, : self.width] = attention[owners]
        if _plain_layers(prefill):
            from transformers.cache_utils import Cache

            reserved_layer = reserved_layer_class()
            self.cache = Cache(layers=[reserved_layer.repeated(layer, owners, capacity) for layer in prefill.layers])
        else:
            prefill.batch_select_indices(owners)
            self.cache = prefill

    def forward(self, model: Any, chosen: torch.Tensor, step: int) -> torch.Tensor:
        """Float32 ``[rows, V]`` logits after feeding each running row its token of ``step``."""
        length = self.width + step + 1
        named = {}
        if self.adapters is not None:
            named["adapter_names"] = [self.adapters[r] for r in self.rows.tolist()]
        out = model(input_ids=chosen[self.rows, None], attention_mask=self.mask[:, :length],
                    position_ids=(self.next_position + step)[:, None], use_cache=True, **{cache_keyword(): self.cache},
                    **named)
        return out.logits[:, -1].float()

    def drop_finished(self, unfinished: torch.Tensor) -> None:
        """Compact the rows once enough of them have finished."""
        keep = unfinished[self.rows]
        done = len(keep) - int(keep.sum())
        if done == 0 or done * COMPACT_FRACTION < len(keep):
            return
        index = keep.nonzero().squeeze(1)
        self.rows, self.next_position, self.mask = self.rows[index], self.next_position[index], self.mask[index]
        if isinstance(self.cache.layers[0], reserved_layer_class()):
            for layer in self.cache.layers:
                layer.select(index)
        else:
            self.cache.batch_select_indices(index)


def _plain_layers(prefill: Any) -> bool:
    """Whether every layer of the prefill's cache is a plain full-attention ``DynamicLayer`` (the
    reserved buffers replace exactly that; sliding windows and other layers keep their own)."""
    from transformers.cache_utils import DynamicLayer

    return bool(prefill.layers) and all(type(layer) is DynamicLayer for layer in prefill.layers)


@functools.cache
def reserved_layer_class() -> type:
    """The cache layer class of :func:`sample`'s reserved buffers (a ``DynamicLayer``, so the model's
    attention treats it as its own; defined on first use, when transformers is imported)."""
    from transformers.cache_utils import DynamicLayer

    class Reserved(DynamicLayer):
        """A layer's keys and values in ``[B, H, capacity, D]`` buffers reserved for the call:
        ``update`` writes the new positions in place and returns views of the filled part."""

        def __init__(self, keys: torch.Tensor, values: torch.Tensor, length: int) -> None:
            super().__init__()
            self.buffers, self.length = (keys, values), length
            self.device, self.is_initialized = keys.device, True
            self._show()

        @classmethod
        def repeated(cls, layer: Any, rows: torch.Tensor, capacity: int) -> Reserved:
            """From a prefill's layer: row ``b`` holds prompt ``rows[b]``'s keys and values."""
            length = layer.keys.shape[-2]
            buffers = []
            for states in (layer.keys, layer.values):
                buffer = states.new_empty((len(rows), states.shape[1], capacity, states.shape[3]))
                buffer[:, :, :length] = states[rows]
                buffers.append(buffer)
            return cls(buffers[0], buffers[1], length)

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
            end = self.length + key_states.shape[-2]
            self.buffers[0][:, :, self.length : end] = key_states
            self.buffers[1][:, :, self.length : end] = value_states
            self.length = end
            self._show()
            return self.keys, self.values

        def select(self, rows: torch.Tensor) -> None:
            """Keep only ``rows`` (compaction after rows finished)."""
            self.buffers = tuple(b.index_select(0, rows) for b in self.buffers)
            self._show()

        def _show(self) -> None:
            self.keys, self.values = (b[:, :, : self.length] for b in self.buffers)

    return Reserved


def _stop_strings(tokenizer: Any, stop_strings: tuple[str, ...]) -> Any:
    if not stop_strings:
        return None
    from transformers import StopStringCriteria

    return StopStringCriteria(tokenizer, list(stop_strings))


def _last_logits_only(model: Any) -> dict[str, int]:
    """``logits_to_keep=1`` where the model takes it: the prefill needs the last position's logits
    (a ``PeftModel`` passes it on to the model it wraps)."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    return {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(type(inner).forward).parameters else {}
