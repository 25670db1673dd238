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

from grpo_run.core.memory.plan_parts import GIB, Part, ProcessPlan, count, gib, params_note
from grpo_run.core.memory.states import ModelStates, StateLoad, model_states

__all__ = ["GIB", "Part", "ProcessPlan", "count", "gib", "params_note"]

HEADROOM = {"cuda": 0.9, "cpu": 0.8}
"""The share of a device's memory a plan may fill. CUDA: 10% for the allocator's reserve and
fragmentation (the context and workspaces sit outside what ``mem_get_info`` reports free); CPU:
80% of the memory available, the rest for the allocator's retained pages (measured at up to 15%
of a SmolLM2 run's peak above the plan, docs/memory.md), the scoring and environment workers and
the rest of the machine."""
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
class LearnerLoad:
    """What a learner rank's memory depends on, in numbers."""

    states: StateLoad
    """The model states: parameters, strategy, reference policy."""
    device: str
    """``"cuda"`` or ``"cpu"``."""
    costs: MicroBatchCosts
    tokens_per_rank: int
    """Tokens of the largest rollout batch this rank trains on (every sequence whole)."""
    micro_batches: Callable[[int], tuple[int, ...]]
    """Tokens of each micro-batch of a mini-batch under a budget (0: one, the whole mini-batch)."""
    logprob_passes: int = 0
    """No-grad passes per step: old log-probs (several updates per step), reference log-probs."""
    runtime_bytes: float = 0.0
    """The process itself: on the CPU, the interpreter and libraries (resident set before any model)."""
    sync: Part | None = None
    """What rank 0 builds for a weight sync (a full copy of the weights, merged LoRA weights, or
    the adapter), held until the engines have it."""
    sync_on_host: bool = False
    """The weight sync's copy is gathered into the host's memory (fsdp2), not the device's."""


def learner_process(load: LearnerLoad, budget: int, logprob_budget: int, name: str = "learner",
                    extra: Sequence[Part] = (), extra_transient: Sequence[Part] = (), rank: int = 0) -> ProcessPlan:
    """The plan of a learner process training under ``budget`` tokens per forward (0: the whole
    mini-batch) and ``logprob_budget`` per no-grad pass. ``extra``: resident parts of other
    components in the same process (an engine's weights); ``extra_transient``: their phase (a
    generation's KV cache)."""
    states = model_states(load.states)
    resident = list(states.resident)
    if load.runtime_bytes:
        resident.append(Part("runtime", load.runtime_bytes, "interpreter, torch and libraries"))
    resident.append(Part("rollout batch", load.tokens_per_rank * ROLLOUT_BYTES_PER_TOKEN,
                         f"{load.tokens_per_rank:,} tokens"))
    resident += extra
    phases: list[tuple[str, tuple[Part, ...]]] = [
        ("training micro-batch", training_parts(load, load.micro_batches(budget), states)),
        ("optimizer step", (*states.gradients, Part("step temporaries", states.step_temporaries,
                                                    "multi-tensor AdamW" if states.step_temporaries else ""))),
    ]
    if load.logprob_passes:
        lp_micro = max(load.micro_batches(logprob_budget))
        lp = [Part("activations (no grad)", load.costs.no_grad.at(lp_micro), f"{lp_micro:,} tokens per forward")]
        if states.gathered_no_grad:
            lp.append(Part("gathered weights", states.gathered_no_grad, "units whole for the forward"))
        phases.append(("log-prob pass", tuple(lp)))
    if load.sync is not None and rank == 0 and not load.sync_on_host and load.sync.bytes:
        phases.append(("weight sync", (load.sync,)))
    if extra_transient:
        phases.append(("generation", tuple(extra_transient)))
    return ProcessPlan(name, load.device, tuple(resident), tuple(phases),
                       adds_up=("generation",) if load.device == "cpu" and extra_transient else ())


def host_parts(load: LearnerLoad) -> tuple[Part, ...]:
    """What a learner rank keeps in the host's memory (offloaded optimizer state or weights)."""
    return model_states(load.states).host


def training_parts(load: LearnerLoad, micro: Sequence[int], states: ModelStates | None = None) -> tuple[Part, ...]:
    """The gradients, gathered weights and activations of a mini-batch's largest training moment.
    Each mini-batch starts without gradients: its first micro-batch holds only the output layer's
    at its peak (the first the backward makes); every later one holds all of them beside its
    activations."""
    states = states or model_states(load.states)
    sharded = load.states.shards_weights and load.states.world_size > 1
    first = Part("gradients", states.first_gradients,
                 "every shard, as units reduce-scatter" if sharded else "the output layer's, made first")
    candidates = [((first,), micro[0])] + [(states.gradients, tokens) for tokens in micro[1:]]
    best: tuple[Part, ...] = ()
    for grads, tokens in candidates:
        parts = (*grads, *states.gathered, Part("activations", load.costs.train.at(tokens), f"{tokens:,} tokens per forward"))
        if not best or sum(p.bytes for p in parts) > sum(p.bytes for p in best):
            best = parts
    return best


def usable_bytes(device: str, capacity: float) -> float:
    """What a plan may fill of ``capacity`` bytes of ``device`` (see :data:`HEADROOM`)."""
    return capacity * HEADROOM["cuda" if device.startswith("cuda") else "cpu"]


def round_down(tokens: int) -> int:
    """``tokens`` down to a multiple of :data:`BUDGET_STEP` (unchanged below one step)."""
    return tokens - tokens % BUDGET_STEP if tokens >= BUDGET_STEP else tokens


def activation_bound(hidden: int, intermediate: int, q_dim: int, kv_dim: int, layers: int, vocab: int) -> ActivationCost:
    """A generous upper bound of a training micro-batch's cost for a decoder-only model in any
    precision, without checkpointing (measured costs stay below it: float32 Llama layers keep
    66-81 H bytes a token, float32 logits 12 V): where even this fits, no budget is needed and
    nothing need be measured."""
    per_layer = 32 * hidden + 16 * intermediate + 8 * (q_dim + 2 * kv_dim)
    return ActivationCost.linear(layers * per_layer + 16 * hidden + 24 * vocab, 8.0 * vocab * hidden)
