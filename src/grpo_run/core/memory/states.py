"""What a learner rank holds of the model itself -- weights, gradients, optimizer state, the
reference policy, the parameters a sharded strategy gathers for a forward -- by strategy, counted
from the parameter counts alone (no DeepSpeed or GPU needed).

Per trainable parameter, in bytes (``p``: bytes of ``model.dtype``; ``N``: ranks):

========================  =========  =====================  =========================  ===============
strategy                  weights    gradients              optimizer (AdamW)          gathered
========================  =========  =====================  =========================  ===============
single                    p          p                      2p                         --
ddp                       p          p + p (buckets)        2p                         --
fsdp2                     p / N      p / N                  2p / N                     units, below
ZeRO-1, 16-bit            2          2 + 4 / N              (4 master + 8) / N         --
ZeRO-2, 16-bit            2          (2 + 4) / N            (4 master + 8) / N         --
ZeRO-3, 16-bit            2 / N      4 / N                  (4 master + 8) / N         4 x largest unit
ZeRO-1/2/3, float32       as 16-bit with p = 4: no master copy, gradients 4 (ZeRO-1) or 4 / N
========================  =========  =====================  =========================  ===============

The ZeRO rows are DeepSpeed's own accounting (its ``estimate_zero2_model_states_mem_needs`` and
``estimate_zero3_model_states_mem_needs``: 2 + 18 / N and 18 / N plus four bytes per parameter of
the largest layer), which a test holds this module to where DeepSpeed is installed.

FSDP2 gathers one unit (a decoder layer) at a time for its forward and backward, and prefetches
the next, so two layers' parameters are whole at once, beside the root unit's (the embedding,
the output layer and the final norm), which stay whole from the first forward to the end of the
backward; in the backward one unit's whole gradient exists until it is reduce-scattered.
"""

from __future__ import annotations

import attrs

from grpo_run.core.memory.plan_parts import Part, count, params_note


@attrs.frozen
class StateLoad:
    """What the model states depend on, in numbers."""

    params: int
    param_bytes: int
    """Bytes per weight (``model.dtype``)."""
    trainable: int
    trainable_bytes: int
    """Bytes per trainable parameter (LoRA adapters are float32)."""
    strategy: str = "single"
    """``"single"``, ``"ddp"``, ``"fsdp2"`` or ``"deepspeed"``."""
    stage: int = 0
    world_size: int = 1
    layer_params: int = 0
    """Parameters of the largest decoder layer (a sharded strategy's unit)."""
    root_params: int = 0
    """Parameters outside the decoder layers (embedding, output layer, final norm)."""
    head_params: int = 0
    """Parameters of the output layer: the first gradient a backward makes (0 with LoRA)."""
    reference_bytes: int = 0
    """Bytes per parameter of a reference policy held beside the policy (0: none, or LoRA's
    adapter-disabled view)."""
    reference_sharded: bool = False
    offload_optimizer: bool = False
    offload_params: bool = False
    foreach: bool = False
    """Multi-tensor AdamW (CUDA): temporaries as large as the trainable weights."""
    variants: int = 1
    """LoRA adapters on the one base model (a sweep's variants), each with its optimizer state;
    their learner steps take turns, so one variant's gradients exist at a time."""

    @property
    def lora(self) -> bool:
        return self.trainable < self.params

    @property
    def zero(self) -> int:
        return self.stage if self.strategy == "deepspeed" else 0

    @property
    def shards_weights(self) -> bool:
        return self.strategy == "fsdp2" or self.zero == 3

    @property
    def mixed(self) -> bool:
        """DeepSpeed with 16-bit weights: float32 master weights, gradients and optimizer state."""
        return self.zero > 0 and self.param_bytes == 2


@attrs.frozen
class ModelStates:
    """A rank's model states: resident parts, the gradients of a mini-batch, what a forward gathers."""

    resident: tuple[Part, ...]
    """Held all along (weights, master weights, optimizer state, reference policy)."""
    host: tuple[Part, ...]
    """Held in the host's memory instead of the device's (offloaded optimizer state or weights)."""
    gradients: tuple[Part, ...]
    """Held from a mini-batch's first backward to its optimizer step."""
    first_gradients: float
    """Of the gradients, what the first micro-batch of a mini-batch holds at its peak: the output
    layer's, made first (with LoRA: none that size); with a sharded strategy every shard."""
    gathered: tuple[Part, ...]
    """Whole parameters (and gradients) a sharded strategy holds during a training forward and backward."""
    gathered_no_grad: float
    """Whole parameters held during a no-grad pass (the policy's, or the sharded reference's)."""
    step_temporaries: float


def model_states(load: StateLoad) -> ModelStates:
    """The model states of one rank of ``load`` (see the module's table)."""
    n = max(1, load.world_size)
    p, t = load.param_bytes, load.trainable
    zero = load.zero
    shard_w = n if load.shards_weights else 1
    resident = [Part("weights", load.params * p / shard_w, params_note(load.params, p, shard_w))]
    v = max(1, load.variants)
    each = f"{v} variants x " if v > 1 else ""
    if load.lora:
        resident[0] = Part("weights", load.params * p / shard_w, params_note(load.params, p, shard_w) + " (frozen base)")
        resident.append(Part("LoRA adapters", v * t * load.trainable_bytes / shard_w,
                             each + params_note(t, load.trainable_bytes, shard_w)))
    tb = load.trainable_bytes
    master = 4 if zero and tb == 2 else 0
    state_bytes = 8 if zero and tb == 2 else 2 * tb
    shard_o = n if (zero or load.strategy == "fsdp2") else 1
    optimizer = [Part("optimizer state", v * t * state_bytes / shard_o,
                      f"{each}AdamW: 2 x {count(t)} x {state_bytes // 2} bytes" + (f" / {shard_o} ranks" if shard_o > 1 else ""))]
    if master:
        optimizer.append(Part("master weights", t * master / shard_o, f"float32 copy of the trainable weights / {shard_o} ranks"))
    host: list[Part] = []
    if load.offload_optimizer:
        host += optimizer
    else:
        resident += optimizer
    if load.offload_params and load.shards_weights:
        host.append(resident[0])
        resident[0] = Part("weights", 0.0, "offloaded to the host between uses")
    if load.reference_bytes:
        shard_r = n if load.reference_sharded else 1
        resident.append(Part("reference policy", load.params * load.reference_bytes / shard_r,
                             "a frozen copy: " + params_note(load.params, load.reference_bytes, shard_r)))
    gradients = _gradients(load, n)
    gathered, gathered_no_grad = _gathered(load)
    step = t * tb / shard_o if load.foreach and not load.offload_optimizer else 0.0
    # A mini-batch's first backward makes the output layer's gradient first; a sharded strategy
    # reduce-scatters each unit's as the backward goes, so its shards all exist before it ends.
    first = sum(p.bytes for p in gradients) if load.shards_weights and n > 1 else load.head_params * tb
    return ModelStates(tuple(resident), tuple(host), tuple(gradients), first, tuple(gathered),
                       gathered_no_grad, step)


def _gradients(load: StateLoad, n: int) -> list[Part]:
    t, tb, zero = load.trainable, load.trainable_bytes, load.zero
    if load.strategy == "ddp":
        return [Part("gradients", t * tb, "trainable"), Part("DDP gradient buckets", t * tb, "a second copy of the gradients")]
    if load.strategy == "fsdp2":
        return [Part("gradients", t * tb / n, f"trainable / {n} ranks")]
    if zero:
        if tb == 2:  # 16-bit gradients, and the float32 partition the optimizer steps with
            if zero == 1:
                return [Part("gradients", t * 2 + t * 4 / n, f"16-bit, and float32 / {n} ranks")]
            if zero == 2:
                return [Part("gradients", t * 6 / n, f"16-bit and float32 / {n} ranks")]
            return [Part("gradients", t * 4 / n, f"float32 / {n} ranks")]
        return [Part("gradients", t * tb / (1 if zero == 1 else n), "trainable" + ("" if zero == 1 else f" / {n} ranks"))]
    return [Part("gradients", t * tb, "trainable")]


def _gathered(load: StateLoad) -> tuple[list[Part], float]:
    """``(gathered parts in a training pass, gathered bytes in a no-grad pass)``."""
    if not load.shards_weights or load.world_size < 2:
        return [], 0.0
    p, layer, root = load.param_bytes, load.layer_params, load.root_params
    if load.zero == 3:  # DeepSpeed: the largest layer's 16-bit weights and gradients
        size = 4 * layer if p == 2 else 8 * layer
        part = Part("gathered layer", size, f"the largest layer ({count(layer)} params) whole, weights and gradients")
        return [part], size / 2
    whole = (root + 2 * layer) * p
    grads = (root + layer) * load.trainable_bytes if not load.lora else 0.0
    parts = [Part("gathered weights", whole, f"root ({count(root)} params) and two layers ({count(layer)} each) whole")]
    if grads:
        parts.append(Part("gathered gradients", grads, "the root's and one layer's whole gradient before reduce-scatter"))
    reference = (root + 2 * layer) * load.reference_bytes if load.reference_sharded else 0.0
    return parts, max(whole, reference)
