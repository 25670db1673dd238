"""What one token costs the learner in memory, measured on the model's own code with fake tensors.

The plan (:mod:`grpo_run.core.memory.plan`) needs, for the run's model and settings, the memory
of one micro-batch as a function of its tokens. :func:`activation_costs` measures it: the
project's own training micro-batch (forward, loss, backward, with gradients already present as
after an earlier micro-batch) and no-grad log-prob pass run on fake tensors
(:class:`~grpo_run.core.memory.fake.FakeDevice`) for a copy of the model cut to
:data:`PROBE_LAYERS` decoder layers, at two token counts (a rank's share of a mini-batch and
half of it), with the rollout's sequence lengths and prompt sharing. Every decoder layer of these models is the same, so what the second layer's
forward keeps is what each layer keeps, and the rest is the embedding, the output layer and the
loss. The training pass has two moments that may hold the most:

* the output layer's backward, while every layer's saved tensors are held (the peak without
  gradient checkpointing, and with it at small batches);
* a decoder layer's backward (with checkpointing: its recomputed activations beside every
  layer's saved input -- the peak with checkpointing at large batches).

Both are measured (the counter's peak is read when the gradient reaches the last layer's output,
and again at the end), each as ``layers x kept per layer + the rest``, linear in the tokens; the
larger counts. A few seconds on two cores, for any architecture transformers builds.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import attrs
import torch

from grpo_run.core.learner.aggregation import LossNormaliser
from grpo_run.core.learner.learner import Learner
from grpo_run.core.learner.logprobs import batch_layout
from grpo_run.core.learner.lora import wrap_policy
from grpo_run.core.learner.micro import micro_batch_bins
from grpo_run.core.learner.output_layer import chunk_rows
from grpo_run.core.learner.simulate import cuda_kernels, full_logits_of, learner_model, rollout_sequences
from grpo_run.core.learner.spec import LearnerSpec
from grpo_run.core.learner.strategies.sharding import rank_shares
from grpo_run.core.memory.fake import FakeDevice
from grpo_run.core.memory.plan import ActivationCost, MicroBatchCosts
from grpo_run.core.memory.shapes import RolloutShape
from grpo_run.core.rollout.packing import pack_sequences

PROBE_LAYERS = 2
"""Decoder layers of the probe model: the second one's cost is what every layer adds."""
PROBE_CHUNKS = 2
"""The smaller probe point fills at least this many of the output layer's chunks."""


def activation_costs(
    spec: LearnerSpec, config: Any, rollout: RolloutShape, *, device: str, other: bool = True,
    full_logits: bool = False,
) -> MicroBatchCosts:
    """The training and no-grad micro-batch costs of ``spec``'s learner for a model of ``config``,
    simulated for ``device`` (``"cuda"`` or ``"cpu"``), with the run's gradient checkpointing
    setting and (``other``) with the other one too. ``full_logits``: as for a model that
    post-processes its logits (real ``[tokens, V]`` logits instead of the chunked log-probs)."""
    layers = int(_text_config(config).num_hidden_layers)
    mine = spec.model.gradient_checkpointing
    train, no_grad = _probe(spec, config, rollout, device, layers, full_logits)
    train_other = train
    if other:
        flipped = attrs.evolve(spec, model=attrs.evolve(spec.model, gradient_checkpointing=not mine))
        train_other = _probe(flipped, config, rollout, device, layers, full_logits)[0]
    return MicroBatchCosts(train=train, train_other=train_other, no_grad=no_grad)


def _probe(spec: LearnerSpec, config: Any, rollout: RolloutShape, device: str, layers: int,
           full_logits: bool = False) -> tuple[ActivationCost, ActivationCost]:
    """The costs measured at two micro-batches of whole groups (:func:`probe_shapes`): exact
    where the cost is linear in the tokens, and an upper bound below (the output layer's chunks
    stop growing with the tokens once full, which makes the cost concave)."""
    vocab = int(_text_config(config).vocab_size)
    shapes = probe_shapes(rollout, spec.algorithm.num_mini_batches, chunk_rows(vocab), spec.algorithm.share_prompts)
    probed = [_measure(spec, _cut(config, PROBE_LAYERS), shape, device, full_logits) for shape in shapes]
    tokens = [shape.tokens for shape in shapes]
    if len(probed) == 1:  # one sequence: a line through the origin
        probed, tokens = [_Probed(0, 0, 0, 0), *probed], [0, *tokens]
    kept = [p.layer for p in probed]
    pieces = [_line(tokens, kept, [p.head - PROBE_LAYERS * p.layer for p in probed], layers)]
    if all(p.layers is not None for p in probed):
        pieces.append(_line(tokens, kept, [p.layers - PROBE_LAYERS * p.layer for p in probed], layers))  # type: ignore[operator]
    per_layer = (kept[1] - kept[0]) / (tokens[1] - tokens[0])
    no_grad = _line(tokens, [0, 0], [p.no_grad for p in probed], layers)
    return ActivationCost(tuple(pieces), per_layer_token=per_layer), ActivationCost((no_grad,))


def probe_shapes(rollout: RolloutShape, num_mini_batches: int, chunk: int, share_prompts: bool) -> list[RolloutShape]:
    """The micro-batches the probe measures: ``g`` and ``2 g`` groups of the rollout's sequences,
    ``g`` the fewest whose output-layer pass fills :data:`PROBE_CHUNKS` chunks of ``chunk`` tokens
    (past that every cost grows linearly with the groups, so two points give the line); where a
    mini-batch has fewer groups than ``2 g``, the mini-batch and half of it (or of its samples)."""
    groups = max(1, math.ceil(rollout.prompts / max(1, num_mini_batches)))
    per_group = RolloutShape(1, rollout.samples, rollout.prompt_tokens, rollout.response_tokens)
    streamed = per_group.tokens * per_group.stream_fraction(share_prompts)
    g = max(1, math.ceil(PROBE_CHUNKS * chunk / max(1.0, streamed)))
    if 2 * g <= groups:
        return [attrs.evolve(per_group, prompts=g), attrs.evolve(per_group, prompts=2 * g)]
    whole = attrs.evolve(per_group, prompts=groups)
    if groups > 1:
        return [attrs.evolve(whole, prompts=groups // 2), whole]
    if rollout.samples > 1:
        return [attrs.evolve(whole, samples=rollout.samples // 2), whole]
    return [whole]


def _line(tokens: list[int], per_layer: list[int], rest: list[int], layers: int) -> tuple[float, float]:
    """``(per_token, fixed)`` of ``layers x (a T + b) + c T + d`` through the two probe points."""
    t1, span = tokens[0], tokens[1] - tokens[0]
    a = (per_layer[1] - per_layer[0]) / span
    b = per_layer[0] - a * t1
    c = (rest[1] - rest[0]) / span
    d = rest[0] - c * t1
    return layers * a + c, max(0.0, layers * b + d)


@attrs.frozen
class _Probed:
    head: int
    """Peak of a training micro-batch above the weights and gradients, up to the moment the
    gradient reaches the last decoder layer (the output layer's backward)."""
    layers: int | None
    """The peak after that moment (the decoder layers' backward); ``None`` if it was not seen."""
    layer: int
    """What the second decoder layer's forward left alive (kept for the backward)."""
    no_grad: int
    """Peak of a no-grad log-prob pass above the weights and gradients."""


def _measure(spec: LearnerSpec, config: Any, rollout: RolloutShape, device: str, full_logits: bool = False) -> _Probed:
    """One training micro-batch and one no-grad log-prob pass over one packed batch of ``rollout``."""
    spec = attrs.evolve(spec, forward_tokens=0, logprob_forward_tokens=0, budget_plan=None)
    seqs = rollout_sequences(rollout, vocab_size=int(_text_config(config).vocab_size))
    batch = pack_sequences(seqs, max(spec.algorithm.pack_length, max(len(s) for s in seqs)), spec.pad_token_id)
    layout = batch_layout(batch, share_prompts=spec.algorithm.share_prompts)
    fake = FakeDevice()
    with fake, cuda_kernels(device == "cuda"):
        policy = learner_model(config, spec)
        with full_logits_of(policy) if full_logits else contextlib.nullcontext(), _watch_layers(policy, fake) as seen:
            if spec.model.lora is not None:
                policy = wrap_policy(policy, spec.model.lora)
            learner = Learner(spec, policy, None, spec.loss.build(), None)
            for param in policy.parameters():  # gradients exist, as after a first micro-batch
                if param.requires_grad:
                    param.grad = torch.zeros_like(param)
            normaliser = LossNormaliser.for_batches([(batch.completion_mask, batch.seq_ids, batch.num_seqs)])
            base = fake.counter.live
            fake.counter.reset_peak()
            learner._micro_update(batch, layout, None, None, normaliser)
            end_peak = fake.counter.peak - base
            head = seen.head_peak - base if seen.head_peak is not None else end_peak
            layers = end_peak if seen.head_peak is not None else None
            layer = seen.deltas[1] if len(seen.deltas) > 1 else 0
        base = fake.counter.live
        fake.counter.reset_peak()
        with torch.no_grad():
            learner._policy_logprobs(policy, batch, layout)
        no_grad = fake.counter.peak - base
    return _Probed(head=head, layers=layers, layer=layer, no_grad=no_grad)


@attrs.define
class _Seen:
    deltas: list[int] = attrs.Factory(list)
    """The live bytes each decoder layer's forward left behind, in call order (the training
    forward's first call of each; a checkpointed layer's recomputation is not counted)."""
    head_peak: int | None = None
    """The counter's peak when the gradient reached the last decoder layer's output."""


@contextmanager
def _watch_layers(model: Any, fake: FakeDevice) -> Iterator[_Seen]:
    seen = _Seen()
    before: list[int] = []
    layers = _decoder_layers(model)

    def pre(_module: Any, _args: Any) -> None:
        before.append(fake.counter.live)

    def post(module: Any, _args: Any, out: Any) -> None:
        if len(seen.deltas) < len(layers):
            seen.deltas.append(fake.counter.live - before.pop())
        hidden = out[0] if isinstance(out, tuple) else out
        if module is layers[-1] and isinstance(hidden, torch.Tensor) and hidden.requires_grad:
            hidden.register_hook(reached)

    def reached(grad: torch.Tensor) -> None:
        if seen.head_peak is None:
            seen.head_peak = fake.counter.peak
            fake.counter.reset_peak()

    handles = [h for layer in layers for h in (layer.register_forward_pre_hook(pre), layer.register_forward_hook(post))]
    try:
        yield seen
    finally:
        for handle in handles:
            handle.remove()


def _decoder_layers(model: Any) -> list[Any]:
    """The model's stack of decoder layers: the longest ``ModuleList`` of modules of one class."""
    best: list[Any] = []
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) > len(best) and len({type(m) for m in module}) == 1:
            best = list(module)
    return best


def _cut(config: Any, layers: int) -> Any:
    """A copy of ``config`` with ``layers`` decoder layers."""
    out = copy.deepcopy(config)
    text = _text_config(out)
    text.num_hidden_layers = layers
    for name in ("layer_types", "mlp_only_layers"):
        value = getattr(text, name, None)
        if isinstance(value, (list, tuple)):
            setattr(text, name, list(value)[:layers])
    return out


def _text_config(config: Any) -> Any:
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def micro_batches(rollout: RolloutShape, num_mini_batches: int, world_size: int) -> Callable[[int], tuple[int, ...]]:
    """Tokens of each micro-batch of rank 0's share of the first mini-batch of ``rollout`` under
    a budget (0: one, the whole share), as :func:`~grpo_run.core.learner.micro.micro_batch_bins`
    deals them."""
    seqs = rollout_sequences(rollout, vocab_size=2**15)
    share = rank_shares(seqs, num_mini_batches, rank=0, world_size=world_size)[0]
    whole = sum(len(s) for s in share)

    @functools.cache
    def tokens(budget: int) -> tuple[int, ...]:
        if budget <= 0 or whole <= budget:
            return (whole,)
        return tuple(sum(len(share[i]) for i in members) for members in micro_batch_bins(share, budget))

    return tokens
