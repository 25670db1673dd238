"""A run's memory plan from its config: every process with its parts (:mod:`.processes`), the
devices' peaks, the token budgets, and whether it fits.

The token budget and the verdict are one computation: the plan is a function of the budgets, and
an ``"auto"`` budget is the largest for which every device of the whole plan -- learner ranks,
engines, verifiers, what generation holds beside the learner -- stays within what is usable.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from grpo_run.core.config.lora_sync import choose_lora_sync
from grpo_run.core.config.schema import RunConfig
from grpo_run.core.memory.plan import BUDGET_STEP, HEADROOM, LearnerLoad, MicroBatchCosts, usable_bytes
from grpo_run.core.memory.plan_parts import Part, ProcessPlan, gib
from grpo_run.core.memory.processes import Component, plan_processes
from grpo_run.core.memory.shapes import ModelShape, RolloutShape
from grpo_run.core.memory.states import StateLoad
from grpo_run.core.plugins.abilities import PlansMemory
from grpo_run.core.plugins.families import ENGINE, VERIFIER
from grpo_run.core.plugins.registry import ComponentRegistry
from grpo_run.core.plugins.types import MemoryPart, MemoryRequest

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
UNKNOWN = -1.0
"""The capacity of a device the plan does not know (the host of another machine)."""


@attrs.frozen
class PlanInputs:
    """What a run plan is made from, besides the config."""

    shape: ModelShape
    costs: MicroBatchCosts
    device: str
    """``"cuda"`` or ``"cpu"``: where the learner runs."""
    capacity: float
    """One device's memory (CUDA), or the RAM available (CPU)."""
    micro_batches: Callable[[int], tuple[int, ...]]
    """The tokens of each micro-batch under a budget, of one rank's share of a mini-batch."""
    runtime_bytes: float = 0.0
    """The trainer process before any model (CPU)."""
    gpus: int = 1
    """GPUs on the machine (CUDA)."""
    host_capacity: float = UNKNOWN
    """The host's memory available, for what a CUDA run keeps there (offloaded state, a gathered
    state dict, a sleeping vLLM's weights); :data:`UNKNOWN`: not known (planning another machine),
    shown but not checked."""
    other_costs: Callable[[], MicroBatchCosts] | None = attrs.field(default=None, eq=False)
    """The costs with the other gradient-checkpointing setting (measured when first asked)."""
    variants: int = 1
    """A sweep's variants on the one base model (``grpo-run plan --vary``): their adapters and
    optimizer states, and the engine's batch of all their requests."""


@attrs.frozen
class RunPlan:
    """Every process of a run with its parts, the devices' memory, and the token budgets."""

    processes: tuple[ProcessPlan, ...]
    capacity: dict[str, float]
    """Memory of each device the plan uses (bytes; ``"cpu"``: the RAM available)."""
    budget: int
    """``learner.max_tokens_per_forward`` in effect (0: the whole mini-batch)."""
    logprob_budget: int
    budget_source: str
    """``"auto"`` or ``"set"``."""
    largest_budget: int
    """The most tokens per training forward for which the whole plan fits (0: not even one sequence)."""
    largest_logprob_budget: int
    longest_sequence: int
    tokens_per_mini_batch: int
    """Tokens of one rank's share of a mini-batch (the largest rollout batch)."""
    turns: bool = True
    """Generation and training take turns (``rollout.async_steps = 1``): a device holds the larger
    of its engines' and its learners' working memory, not both."""
    gpus: int = 1
    limit: float | None = None
    """``learner.max_memory_gib`` in bytes: what a learner's device may hold at most."""
    problems: tuple[str, ...] = ()
    """What stops the run regardless of memory left (an engine that cannot start as configured)."""
    notes: tuple[str, ...] = ()
    advice: str | None = None
    """What does not fit, in one line (when it does not)."""
    suggested: tuple[str, ...] = ()
    """``KEY=VALUE`` overrides that make it fit (the fewest changes found), when it does not."""

    def device_peak(self, device: str) -> float:
        """What ``device`` holds at most: every process's resident parts, and their working
        memory -- added up, except that engines and learners take turns where :attr:`turns`."""
        here = [p for p in self.processes if p.device == device]
        resident = sum(p.resident_bytes for p in here)
        work = {role: sum(p.phase_peak for p in here if p.role == role) for role in ("learner", "engine", "other")}
        if self.turns:
            return resident + max(work["learner"], work["engine"]) + work["other"]
        return resident + sum(work.values())

    def usable(self, device: str) -> float:
        if self.capacity[device] == UNKNOWN:
            return float("inf")
        here = [p for p in self.processes if p.device == device]
        if device != "cpu" and here and all(p.reserves for p in here):
            return self.capacity[device]  # a GPU of vLLM's own: gpu_memory_utilization is its own margin
        usable = usable_bytes(device, self.capacity[device])
        learners = any(p.role == "learner" for p in here)
        return min(usable, self.limit) if self.limit is not None and learners else usable

    @property
    def gpus_used(self) -> int:
        return len({p.device for p in self.processes if p.device.startswith("cuda")})

    @property
    def fits(self) -> bool:
        return (not self.problems and self.largest_budget >= self.longest_sequence and self.gpus_used <= self.gpus
                and all(self.device_peak(d) <= self.usable(d) for d in self.capacity))

    def to_json(self) -> dict[str, Any]:
        return {
            "fits": self.fits,
            "budget": {"max_tokens_per_forward": self.budget, "max_tokens_per_logprob_forward": self.logprob_budget,
                       "source": self.budget_source, "largest_that_fits": self.largest_budget,
                       "largest_logprob_that_fits": self.largest_logprob_budget},
            "devices": {d: {"capacity_bytes": c if c != UNKNOWN else None,
                            "usable_bytes": self.usable(d) if c != UNKNOWN else None, "peak_bytes": self.device_peak(d)}
                        for d, c in self.capacity.items()},
            "gpus": {"used": self.gpus_used, "available": self.gpus},
            "processes": [
                {"name": p.name, "device": p.device, "peak_bytes": p.peak, "peak_phase": p.peak_phase,
                 "resident": [attrs.asdict(part) for part in p.resident],
                 "phases": {name: [attrs.asdict(part) for part in parts] for name, parts in p.phases}}
                for p in self.processes
            ],
            "problems": list(self.problems),
            "advice": self.advice,
            "suggested": list(self.suggested),
            "notes": list(self.notes),
        }


def rollout_shape(cfg: RunConfig) -> RolloutShape:
    """The largest rollout batch ``cfg`` can produce."""
    return RolloutShape(cfg.rollout.num_unique_prompts_rollout, cfg.rollout.num_samples_per_prompt_rollout,
                        cfg.data.max_prompt_token_length, cfg.rollout.response_length)


def reference_bytes(cfg: RunConfig, device: str) -> int:
    """Bytes per parameter of the reference policy (0: none, or LoRA's adapter-disabled view)."""
    if cfg.kl.beta <= 0 or cfg.kl.reference == "none" or cfg.model.lora is not None:
        return 0
    return DTYPE_BYTES[cfg.kl.reference_dtype_for(cfg.model.dtype, cfg.model.autocast, device)]


def learner_load(cfg: RunConfig, inputs: PlanInputs, adapter_sync: bool = False) -> LearnerLoad:
    """The learner's numbers for ``cfg`` (``adapter_sync``: a LoRA run whose engines receive the adapter)."""
    shape, learner, model = inputs.shape, cfg.learner, cfg.model
    bytes_each = DTYPE_BYTES[model.dtype]
    trainable, trainable_bytes = shape.params, bytes_each
    if model.lora is not None:
        trainable, trainable_bytes = lora_params(shape, model.lora), 4
    world = learner.num_learners
    rollout = rollout_shape(cfg)
    passes = int(cfg.algorithm.num_epochs * cfg.algorithm.num_mini_batches > 1 and not cfg.algorithm.use_engine_logprobs_as_old)
    ref = reference_bytes(cfg, inputs.device)
    sharded = learner.strategy == "fsdp2" or (learner.strategy == "deepspeed" and learner.stage == 3)
    states = StateLoad(
        params=shape.params, param_bytes=bytes_each, trainable=trainable, trainable_bytes=trainable_bytes,
        strategy=learner.strategy, stage=learner.stage, world_size=world, layer_params=shape.layer_params,
        root_params=shape.root_params, head_params=(shape.head_params or shape.embedding_params) if model.lora is None else 0,
        reference_bytes=ref, reference_sharded=sharded and ref > 0,
        offload_optimizer=learner.offload_optimizer, offload_params=learner.offload_params,
        foreach=inputs.device == "cuda", variants=inputs.variants,
    )
    return LearnerLoad(
        states=states, device=inputs.device, costs=inputs.costs, tokens_per_rank=-(-rollout.tokens // world),
        micro_batches=inputs.micro_batches, logprob_passes=passes + int(ref > 0 or (cfg.kl.beta > 0 and model.lora is not None)),
        runtime_bytes=inputs.runtime_bytes if inputs.device == "cpu" else 0.0,
        sync=_sync_part(cfg, shape, trainable, bytes_each, adapter_sync),
        sync_on_host=learner.strategy == "fsdp2" and model.lora is None,
    )


def _sync_part(cfg: RunConfig, shape: ModelShape, trainable: int, bytes_each: int, adapter: bool) -> Part:
    """What rank 0 builds for a weight sync: the adapter (LoRA with adapter sync), or a full copy
    of the weights (merged LoRA weights, or the strategy's gathered state dict)."""
    if cfg.model.lora is not None and adapter:
        return Part("the adapter", trainable * 4, "engines receive the adapter only (model.lora.sync)")
    what = "merged LoRA weights" if cfg.model.lora is not None else "a full copy of the weights"
    return Part(what, shape.params * bytes_each, "for the engines, until they have it")


def lora_params(shape: ModelShape, lora: Any) -> int:
    """Parameters of LoRA adapters of rank ``lora.r`` on the layers ``lora`` targets."""
    total = 0
    for name, fan_in, fan_out in shape.linear_shapes:
        if lora.target_modules != "all-linear" and not any(name.endswith(t) for t in lora.target_modules):
            continue
        if lora.layers_to_transform and not any(f".{i}." in f".{name}." for i in lora.layers_to_transform):
            continue
        total += lora.r * (fan_in + fan_out) + (fan_out if lora.use_dora else 0)
    return total


def memory_request(cfg: RunConfig, inputs: PlanInputs, adapter_sync: bool = False) -> MemoryRequest:
    shape, rollout = inputs.shape, rollout_shape(cfg)
    adapter = lora_params(shape, cfg.model.lora) if adapter_sync and cfg.model.lora is not None else 0
    return MemoryRequest(
        params=shape.params, param_bytes=DTYPE_BYTES[cfg.model.dtype], layers=shape.layers, kv_dim=shape.kv_dim,
        vocab=shape.vocab, sequences=rollout.sequences * inputs.variants, prompt_tokens=rollout.prompt_tokens,
        response_tokens=rollout.response_tokens, device=inputs.device,
        device_bytes=int(inputs.capacity) if inputs.device == "cuda" else None,
        hidden=shape.hidden, context=shape.context, engines=cfg.engine.num_engines,
        overlaps_learner=cfg.rollout.async_steps > 1, adapter_params=adapter * inputs.variants,
    )


def components(cfg: RunConfig, registry: ComponentRegistry, request: MemoryRequest, notes: list[str]) -> list[Component]:
    """The engines (one :class:`Component` each) and every verifier that plans memory; a
    component whose plan fails is left out, with a line in ``notes`` saying why."""
    out: list[Component] = []
    engine = registry.get(ENGINE, cfg.engine.name)
    parts = tuple(_parts_of(engine, cfg.engine.config, request, f"{cfg.engine.name} engine", notes))
    count = cfg.engine.num_engines
    for i in range(count):
        out.append(Component(f"{cfg.engine.name} engine" + (f" {i}" if count > 1 else ""), parts, engine=True, index=i))
    for name, slot in cfg.verifiers.items():
        if registry.has(VERIFIER, name):
            config = getattr(slot, "config", slot)
            found = tuple(_parts_of(registry.get(VERIFIER, name), config, request, f"{name} verifier", notes))
            if found:
                out.append(Component(f"{name} verifier", found))
    return out


def _parts_of(cls: type, config: Any, request: MemoryRequest, label: str, notes: list[str]) -> list[MemoryPart]:
    if not isinstance(cls, PlansMemory):
        return []
    try:
        return list(cls.memory_parts(config, request))
    except Exception as exc:  # a plugin's planning fails: the plan goes on without it, and says so
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        notes.append(f"{label}: not counted ({type(exc).__name__}: {first})")
        return []


def plan_run(cfg: RunConfig, registry: ComponentRegistry, inputs: PlanInputs,
             found: list[Component] | None = None, *, quick: bool = False) -> RunPlan:
    """The memory plan of ``cfg`` under its budgets, an ``"auto"`` one the largest for which the
    whole plan fits (see the module docstring; :mod:`.advice` says what to change when it does not).
    ``quick``: only whether it fits at all (at the smallest budget), for a search."""
    notes = _notes(cfg, inputs)
    sync = choose_lora_sync(cfg, registry)
    adapter = sync is not None and sync.mode == "adapter"
    if found is None:
        found = components(cfg, registry, memory_request(cfg, inputs, adapter), notes)
    load = learner_load(cfg, inputs, adapter)
    rollout = rollout_shape(cfg)
    longest = rollout.prompt_tokens + rollout.response_tokens
    whole = inputs.micro_batches(0)[0]

    def plan(budget: int, lp: int, **fields: Any) -> RunPlan:
        return _assemble(cfg, inputs, load, found, budget, lp, longest, whole, notes, **fields)

    def fits_with(budget: int, lp: int) -> bool:
        trial = plan(budget, lp, largest_budget=budget, largest_logprob_budget=lp)
        return all(trial.device_peak(d) <= trial.usable(d) for d in trial.capacity)

    candidates = _candidates(longest, whole)
    floor = candidates[0]
    setting = cfg.learner.max_tokens_per_forward
    source = "auto" if setting == "auto" else "set"
    lp_setting = cfg.learner.max_tokens_per_logprob_forward
    lp_auto = lp_setting == "auto" or (lp_setting is None and source == "auto")
    if quick:  # the smallest budgets the settings allow: does it fit at all?
        b = floor if source == "auto" else max(floor, min(int(setting) or whole, whole))
        lp = floor if lp_auto else max(floor, min((int(lp_setting) or whole) if lp_setting is not None else 2 * b, whole))
        ok = fits_with(b, lp)
        return plan(b, lp, largest_budget=b if ok else 0, largest_logprob_budget=lp if ok else 0, budget_source=source)
    most = _largest(candidates, lambda b: fits_with(b, floor))
    most_lp = _largest(candidates, lambda b: fits_with(max(most, floor), b))
    budget = (most or floor) if source == "auto" else (int(setting) or whole)
    if lp_auto:
        logprob_budget = most_lp or floor
    else:
        logprob_budget = (int(lp_setting) or whole) if lp_setting is not None else 2 * budget
    final = plan(min(budget, whole), min(logprob_budget, whole), largest_budget=most, largest_logprob_budget=most_lp)
    return attrs.evolve(final, budget=budget, logprob_budget=logprob_budget, budget_source=source)


def _assemble(cfg: RunConfig, inputs: PlanInputs, load: LearnerLoad, found: list[Component], budget: int, lp: int,
              longest: int, whole: int, notes: list[str], **fields: Any) -> RunPlan:
    processes = plan_processes(cfg, load, found, budget, lp)
    capacity = {p.device: (inputs.host_capacity if p.device == "cpu" and inputs.device == "cuda" else inputs.capacity)
                for p in processes}
    limit = cfg.learner.max_memory_gib * 2**30 if cfg.learner.max_memory_gib is not None else None
    problems = tuple(dict.fromkeys(f"{c.label}: {p.problem}" for c in found for p in c.parts if p.problem))
    return RunPlan(
        processes=tuple(processes), capacity=capacity, budget=budget, logprob_budget=lp,
        budget_source=fields.pop("budget_source", "auto"),
        longest_sequence=longest, tokens_per_mini_batch=whole, turns=cfg.rollout.async_steps == 1,
        gpus=inputs.gpus if inputs.device == "cuda" else 0, limit=limit, problems=problems, notes=tuple(notes),
        **fields,
    )


def _candidates(longest: int, whole: int) -> list[int]:
    """Budgets worth trying: at least one sequence, at most the whole mini-batch, multiples of
    :data:`BUDGET_STEP` between."""
    low = min(longest, whole)
    steps = [b for b in range(-(-low // BUDGET_STEP) * BUDGET_STEP, whole, BUDGET_STEP) if b > low]
    return [low, *steps, whole] if whole > low else [low]


def _largest(candidates: list[int], fits: Callable[[int], bool]) -> int:
    """The largest candidate that fits (they fit up to some point, then no more); 0 if none does."""
    if not fits(candidates[0]):
        return 0
    lo, hi = 0, len(candidates) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(candidates[mid]):
            lo = mid
        else:
            hi = mid - 1
    return candidates[lo]


def _notes(cfg: RunConfig, inputs: PlanInputs) -> list[str]:
    notes = []
    if inputs.device == "cuda":
        notes.append(f"CUDA: the plan fills at most {HEADROOM['cuda']:.0%} of a device's memory; the rest is "
                     "for the caching allocator's reserve and fragmentation, the CUDA context (about 0.5 GiB), "
                     "NCCL buffers and kernel workspaces, which no count sees")
    else:
        notes.append(f"CPU: the plan fills at most {HEADROOM['cpu']:.0%} of the memory available; the rest "
                     "is left to the system and the scoring and environment workers")
    if cfg.distributed.backend == "ray":
        notes.append("Ray: each engine and learner rank is an actor of its own; the plan lists them as processes")
    if cfg.learner.strategy == "fsdp2" and cfg.learner.num_learners > 1 and inputs.device == "cuda":
        whole = inputs.shape.params * DTYPE_BYTES[cfg.model.dtype]
        notes.append(f"fsdp2: at start-up each rank loads the whole policy into the host's memory and shards it onto its "
                     f"GPU one unit at a time: {cfg.learner.num_learners} x {gib(whole)} of the host's memory for a "
                     "moment (the reference after it, in its dtype)")
    return notes


def capacity_lines(plan: RunPlan) -> list[str]:
    """``device: peak of usable (capacity)``, one line per device; identical GPUs once."""
    lines: list[str] = []
    rows = [(d, gib(plan.device_peak(d)), gib(plan.usable(d)), gib(c)) for d, c in plan.capacity.items() if c != UNKNOWN]
    i = 0
    while i < len(rows):
        j = i
        while j + 1 < len(rows) and rows[j + 1][1:] == rows[i][1:] and rows[j + 1][0].startswith("cuda"):
            j += 1
        name = rows[i][0] if j == i else f"{rows[i][0]} to {rows[j][0]} (each)"
        lines.append(f"{name}: {rows[i][1]} of {rows[i][2]} usable ({rows[i][3]})")
        i = j + 1
    lines += [f"{d}: {gib(plan.device_peak(d))}, not checked (the host's memory: --host-memory)"
              for d, c in plan.capacity.items() if c == UNKNOWN]
    return lines
