"""The memory plan of a run: what each process holds, by part, its peak, and the largest token
budget that fits.

A process's memory is its **resident** parts (held all along: weights, optimizer state, the
reference policy, an engine's weights) plus the largest of its **phases** (held one at a time:
a training micro-batch with the gradients, a no-grad log-prob pass, the optimizer step, a
generation's KV cache). The learner's micro-batch costs come from
:mod:`grpo_run.core.learner.probe` (the model's own code on fake tensors) as a linear function
of the micro-batch's tokens (:class:`ActivationCost`); every other part is counted from the
parameter counts and the config. What fits is the peak against the device's memory times a
headroom (:data:`HEADROOM`) that stands for what no count sees: the CUDA caching allocator's
reserve and fragmentation, the CUDA context, NCCL buffers and kernel workspaces, and on the CPU
the allocator's retained pages and everything else the machine runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

GIB = 2**30

HEADROOM = {"cuda": 0.9, "cpu": 0.5}
"""The share of a device's memory a plan may fill. CUDA: 10% for the allocator's reserve and
fragmentation (the context and workspaces sit outside what ``mem_get_info`` reports free);
CPU: half the memory available, the rest left to the operating system, the scoring and
environment workers and the allocator's retained pages."""
CUDA_CONTEXT = GIB // 2
"""The CUDA context and library workspaces, outside torch's allocator (planned from a device's
total memory; a running process sees them as used already)."""
ROLLOUT_BYTES_PER_TOKEN = 48
"""A packed rollout batch on the learner's device: ids, positions, sequence ids, mask,
advantages, engine and old/reference log-probs, layout indices (about 48 bytes a token)."""
BUDGET_STEP = 64
"""Budgets are chosen in multiples of this many tokens."""


@attrs.frozen
class ActivationCost:
    """A micro-batch's memory above the weights and gradients, as a function of its tokens
    (counted as the token budget counts them: every sequence whole): the largest of its
    ``pieces``, each ``per_token x tokens + fixed`` bytes. One piece for most passes; a
    checkpointed training pass has two (the output layer's backward, and a layer recomputed
    while every layer's saved input is held), of which the larger counts."""

    pieces: tuple[tuple[float, float], ...]
    per_layer_token: float = 0.0
    """What each decoder layer keeps per token (for the report)."""

    @classmethod
    def linear(cls, per_token: float, fixed: float, per_layer_token: float = 0.0) -> ActivationCost:
        return cls(((per_token, fixed),), per_layer_token)

    def at(self, tokens: float) -> float:
        return max(per_token * tokens + fixed for per_token, fixed in self.pieces)

    def largest_tokens(self, room: float) -> int:
        """The most tokens whose cost is at most ``room`` bytes (0 when not even one token fits)."""
        best = None
        for per_token, fixed in self.pieces:
            if room < fixed:
                return 0
            fit = (room - fixed) / per_token if per_token > 0 else float("inf")
            best = fit if best is None else min(best, fit)
        return int(min(best or 0.0, 2**40))


@attrs.frozen
class MicroBatchCosts:
    """The learner's micro-batch costs: the training pass with the run's checkpointing setting,
    with the other setting, and the no-grad log-prob pass."""

    train: ActivationCost
    train_other: ActivationCost
    no_grad: ActivationCost


@attrs.frozen
class Part:
    """One part of a process's memory."""

    name: str
    bytes: float
    note: str = ""


@attrs.frozen
class ProcessPlan:
    """One process on one device: resident parts, and phases of which the largest counts."""

    name: str
    device: str
    resident: tuple[Part, ...]
    phases: tuple[tuple[str, tuple[Part, ...]], ...] = ()
    adds_up: tuple[str, ...] = ()
    """Phases whose memory adds to the others' instead of taking turns with them: on the CPU the
    allocator keeps what a thread freed for that thread, so generation (in its own thread) and
    the learner each keep their own peak."""

    @property
    def resident_bytes(self) -> float:
        return sum(p.bytes for p in self.resident)

    def phase_bytes(self, name: str) -> float:
        return sum(p.bytes for p in dict(self.phases)[name])

    @property
    def peak_phase(self) -> str | None:
        turns = [phase for phase in self.phases if phase[0] not in self.adds_up]
        if not turns:
            return None
        return max(turns, key=lambda phase: sum(p.bytes for p in phase[1]))[0]

    @property
    def peak(self) -> float:
        phase = self.peak_phase
        added = sum(self.phase_bytes(name) for name, _ in self.phases if name in self.adds_up)
        return self.resident_bytes + (self.phase_bytes(phase) if phase else 0.0) + added


@attrs.frozen
class LearnerLoad:
    """What the learner's memory depends on, in numbers."""

    params: int
    """Parameters of the model (shared ones once)."""
    param_bytes: int
    """Bytes per weight, gradient and optimizer-state element (``model.dtype``)."""
    trainable: int
    """Parameters that train (all of them, or the LoRA adapters')."""
    trainable_bytes: int
    """Bytes per trainable parameter, its gradient and state (LoRA adapters are float32)."""
    reference: bool
    """A frozen or Polyak reference policy: a second copy of the weights."""
    device: str
    """``"cuda"`` or ``"cpu"``."""
    costs: MicroBatchCosts
    tokens_per_rank: int
    """Tokens of the largest rollout batch this rank trains on (every sequence whole)."""
    micro_batches: Callable[[int], tuple[int, ...]]
    """Tokens of each micro-batch of a mini-batch under a budget (0: one, the whole mini-batch)."""
    head_params: int = 0
    """Parameters of the output layer: the first gradient a backward makes, while the most is held."""
    logprob_passes: int = 0
    """No-grad passes per step: old log-probs (several updates per step), reference log-probs."""
    world_size: int = 1
    shard: str = "none"
    """What data-parallel ranks split: ``"none"`` (single, ddp), ``"optimizer"`` (ZeRO-1),
    ``"gradients"`` (ZeRO-2: and optimizer state), ``"all"`` (ZeRO-3, FSDP2: and weights)."""
    ddp: bool = False
    """DDP's gradient buckets: a second copy of the gradients."""
    offload_optimizer: bool = False
    offload_params: bool = False
    foreach: bool = False
    """The optimizer steps with multi-tensor kernels (CUDA): temporaries as large as the trainable weights."""
    runtime_bytes: float = 0.0
    """The process itself: on the CPU, the interpreter and libraries (resident set before any model)."""


def learner_process(load: LearnerLoad, budget: int, logprob_budget: int, name: str = "learner",
                    extra: Sequence[Part] = (), extra_transient: Sequence[Part] = ()) -> ProcessPlan:
    """The plan of a learner process training under ``budget`` tokens per forward (0: the whole
    mini-batch) and ``logprob_budget`` per no-grad pass. ``extra``: resident parts of other
    components in the same process (an engine's weights); ``extra_transient``: their phase (a
    generation's KV cache)."""
    world = max(1, load.world_size)
    weights = load.params * load.param_bytes / (world if load.shard == "all" else 1)
    adapters = (load.trainable * load.trainable_bytes) if load.trainable < load.params else 0.0
    states = 2 * load.trainable * load.trainable_bytes / (world if load.shard != "none" else 1)
    resident = [Part("weights", weights, _params_note(load.params, load.param_bytes, world if load.shard == "all" else 1))]
    if adapters:
        resident.append(Part("LoRA adapters", adapters, _params_note(load.trainable, load.trainable_bytes)))
    if not load.offload_optimizer:
        resident.append(Part("optimizer state", states, "AdamW: 2 x trainable" + (f" / {world} ranks" if load.shard != "none" else "")))
    if load.reference:
        resident.append(Part("reference policy", load.params * load.param_bytes, "a frozen copy of the weights"))
    if load.runtime_bytes:
        resident.append(Part("runtime", load.runtime_bytes, "interpreter, torch and libraries"))
    resident.append(Part("rollout batch", load.tokens_per_rank * ROLLOUT_BYTES_PER_TOKEN,
                         f"{load.tokens_per_rank:,} tokens"))
    resident += extra
    gradient_parts = _gradient_parts(load)
    phases: list[tuple[str, tuple[Part, ...]]] = [
        ("training micro-batch", training_parts(load, load.micro_batches(budget))),
        ("optimizer step", (*gradient_parts, Part("step temporaries", (load.trainable * load.trainable_bytes
                                                                        / (world if load.shard != "none" else 1))
                                                   if load.foreach and not load.offload_optimizer else 0.0,
                                                   "multi-tensor AdamW" if load.foreach else ""))),
    ]
    if load.logprob_passes:
        lp_micro = max(load.micro_batches(logprob_budget))
        phases.append(("log-prob pass", (Part("activations (no grad)", load.costs.no_grad.at(lp_micro),
                                              f"{lp_micro:,} tokens per forward"),)))
    if extra_transient:
        phases.append(("generation", tuple(extra_transient)))
    return ProcessPlan(name, load.device, tuple(resident), tuple(phases),
                       adds_up=("generation",) if load.device == "cpu" and extra_transient else ())


def training_parts(load: LearnerLoad, micro: Sequence[int]) -> tuple[Part, ...]:
    """The gradients and activations of a mini-batch's largest training moment. Each mini-batch
    starts without gradients: its first micro-batch holds only the output layer's at its peak (the
    first the backward makes); every later one holds all of them beside its activations."""
    first = Part("gradients", load.head_params * load.trainable_bytes, "the output layer's, made first")
    candidates = [(first, micro[0])] + [(None, tokens) for tokens in micro[1:]]
    best: tuple[Part, ...] = ()
    for grads, tokens in candidates:
        held = [grads] if grads is not None else _gradient_parts(load)
        parts = (*held, Part("activations", load.costs.train.at(tokens), f"{tokens:,} tokens per forward"))
        if not best or sum(p.bytes for p in parts) > sum(p.bytes for p in best):
            best = parts
    return best


def _gradient_parts(load: LearnerLoad) -> list[Part]:
    world = max(1, load.world_size)
    sharded = load.shard in ("gradients", "all")
    parts = [Part("gradients", load.trainable * load.trainable_bytes / (world if sharded else 1),
                  "trainable" + (f" / {world} ranks" if sharded else ""))]
    if load.ddp:
        parts.append(Part("DDP gradient buckets", load.trainable * load.trainable_bytes, "a second copy of the gradients"))
    return parts


def largest_budget(load: LearnerLoad, usable: float, extra: float = 0.0) -> int:
    """The largest training budget (tokens per forward) whose micro-batch fits ``usable`` bytes
    beside the learner's resident parts and ``extra`` resident bytes (0: not even one token)."""
    grads = sum(p.bytes for p in _gradient_parts(load))
    room = usable - learner_process(load, 0, 0).resident_bytes - extra
    most = _round_down(load.costs.train.largest_tokens(room - grads))
    whole = load.micro_batches(0)[0]
    if load.costs.train.at(whole) + load.head_params * load.trainable_bytes <= room:
        most = max(most, whole)  # one forward: no gradient but the output layer's at its peak
    return most


def largest_logprob_budget(load: LearnerLoad, usable: float, extra: float = 0.0) -> int:
    """The largest no-grad budget that fits ``usable`` bytes beside the resident parts."""
    room = usable - learner_process(load, 0, 0).resident_bytes - extra
    return _round_down(load.costs.no_grad.largest_tokens(room))


def usable_bytes(device: str, capacity: float) -> float:
    """What a plan may fill of ``capacity`` bytes of ``device`` (see :data:`HEADROOM`)."""
    return capacity * HEADROOM["cuda" if device.startswith("cuda") else "cpu"]


def _round_down(tokens: int) -> int:
    return tokens - tokens % BUDGET_STEP if tokens >= BUDGET_STEP else tokens


def _params_note(params: int, bytes_each: int, ranks: int = 1) -> str:
    text = f"{_count(params)} params x {bytes_each} bytes"
    return text + (f" / {ranks} ranks" if ranks > 1 else "")


def _count(n: float) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}".replace(".0", "")
    return str(int(n))


def gib(n: float) -> str:
    """``n`` bytes as GiB for a person: ``"3.2 GiB"``."""
    return f"{n / GIB:.1f} GiB" if n >= GIB / 10 else f"{n / 2**20:.0f} MiB"


def activation_bound(hidden: int, intermediate: int, q_dim: int, kv_dim: int, layers: int, vocab: int) -> ActivationCost:
    """A generous upper bound of a training micro-batch's cost for a decoder-only model in any
    precision, without checkpointing (measured costs stay below it: float32 Llama layers keep
    66-81 H bytes a token, float32 logits 12 V): where even this fits, no budget is needed and
    nothing need be measured."""
    per_layer = 32 * hidden + 16 * intermediate + 8 * (q_dim + 2 * kv_dim)
    return ActivationCost.linear(layers * per_layer + 16 * hidden + 24 * vocab, 8.0 * vocab * hidden)
