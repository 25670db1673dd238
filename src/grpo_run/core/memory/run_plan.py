"""A run's memory plan from its config: the learner's processes, the engines' and verifiers'
parts (through their :class:`~grpo_run.PlansMemory` ability), per device, and what to change
when it does not fit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from grpo_run.core.config.schema import LoraSection, RunConfig
from grpo_run.core.memory.plan import (
    LearnerLoad, MicroBatchCosts, Part, ProcessPlan, gib, largest_budget, largest_logprob_budget,
    learner_process, usable_bytes,
)
from grpo_run.core.memory.shapes import ModelShape, RolloutShape
from grpo_run.core.plugins.abilities import PlansMemory
from grpo_run.core.plugins.families import ENGINE, VERIFIER
from grpo_run.core.plugins.registry import ComponentRegistry
from grpo_run.core.plugins.types import MemoryPart, MemoryRequest

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


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
    """The most tokens per training forward that fit (0: not even one token)."""
    largest_logprob_budget: int
    longest_sequence: int
    tokens_per_mini_batch: int
    """Tokens of one rank's share of a mini-batch (the largest rollout batch)."""
    advice: str | None = None
    """What to change, when it does not fit."""
    limit: float | None = None
    """``learner.max_memory_gib`` in bytes: what a device may hold at most."""
    notes: tuple[str, ...] = ()

    def device_peak(self, device: str) -> float:
        """The peaks of every process on ``device`` added up (they need not coincide: an upper bound)."""
        return sum(p.peak for p in self.processes if p.device == device)

    def usable(self, device: str) -> float:
        usable = usable_bytes(device, self.capacity[device])
        return min(usable, self.limit) if self.limit is not None else usable

    @property
    def fits(self) -> bool:
        return self.largest_budget >= self.longest_sequence and all(
            self.device_peak(d) <= self.usable(d) for d in self.capacity)

    def to_json(self) -> dict[str, Any]:
        return {
            "fits": self.fits,
            "budget": {"max_tokens_per_forward": self.budget, "max_tokens_per_logprob_forward": self.logprob_budget,
                       "source": self.budget_source, "largest_that_fits": self.largest_budget,
                       "largest_logprob_that_fits": self.largest_logprob_budget},
            "devices": {d: {"capacity_bytes": c, "usable_bytes": self.usable(d), "peak_bytes": self.device_peak(d)}
                        for d, c in self.capacity.items()},
            "processes": [
                {"name": p.name, "device": p.device, "peak_bytes": p.peak, "peak_phase": p.peak_phase,
                 "resident": [attrs.asdict(part) for part in p.resident],
                 "phases": {name: [attrs.asdict(part) for part in parts] for name, parts in p.phases}}
                for p in self.processes
            ],
            "advice": self.advice,
            "notes": list(self.notes),
        }


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
    host_capacity: float = 0.0
    """The machine's memory available (for processes on the CPU beside a CUDA learner)."""


def rollout_shape(cfg: RunConfig) -> RolloutShape:
    """The largest rollout batch ``cfg`` can produce."""
    return RolloutShape(cfg.rollout.num_unique_prompts_rollout, cfg.rollout.num_samples_per_prompt_rollout,
                        cfg.data.max_prompt_token_length, cfg.rollout.response_length)


def learner_load(cfg: RunConfig, inputs: PlanInputs) -> LearnerLoad:
    """The learner's numbers for ``cfg``."""
    shape, learner, model = inputs.shape, cfg.learner, cfg.model
    bytes_each = DTYPE_BYTES[model.dtype]
    trainable, trainable_bytes = shape.params, bytes_each
    if model.lora is not None:
        trainable, trainable_bytes = lora_params(shape, model.lora), 4
    world = learner.num_learners
    rollout = rollout_shape(cfg)
    stage = learner.stage
    shard = {"fsdp2": "all", "deepspeed": {1: "optimizer", 2: "gradients", 3: "all"}.get(stage, "none")}.get(learner.strategy, "none")
    passes = int(cfg.algorithm.num_epochs * cfg.algorithm.num_mini_batches > 1 and not cfg.algorithm.use_engine_logprobs_as_old)
    uses_reference = cfg.kl.beta > 0 and cfg.kl.reference != "none"
    costs = inputs.costs
    return LearnerLoad(
        params=shape.params, param_bytes=bytes_each, trainable=trainable, trainable_bytes=trainable_bytes,
        reference=uses_reference and model.lora is None, device=inputs.device, costs=costs,
        tokens_per_rank=-(-rollout.tokens // world), micro_batches=inputs.micro_batches,
        head_params=shape.vocab * shape.hidden if model.lora is None else 0,
        logprob_passes=passes + int(uses_reference), world_size=world, shard=shard,
        ddp=learner.strategy == "ddp", offload_optimizer=learner.offload_optimizer,
        offload_params=learner.offload_params, foreach=inputs.device == "cuda",
        runtime_bytes=inputs.runtime_bytes if inputs.device == "cpu" else 0.0,
    )


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


def memory_request(cfg: RunConfig, inputs: PlanInputs) -> MemoryRequest:
    shape, rollout = inputs.shape, rollout_shape(cfg)
    return MemoryRequest(
        params=shape.params, param_bytes=DTYPE_BYTES[cfg.model.dtype], layers=shape.layers, kv_dim=shape.kv_dim,
        vocab=shape.vocab, sequences=rollout.sequences, prompt_tokens=rollout.prompt_tokens,
        response_tokens=rollout.response_tokens, device=inputs.device,
        device_bytes=int(inputs.capacity) if inputs.device == "cuda" else None,
    )


def component_parts(cfg: RunConfig, registry: ComponentRegistry, request: MemoryRequest,
                    notes: list[str]) -> list[tuple[str, MemoryPart]]:
    """``(component, part)`` for the engine (once per engine) and every verifier that plans
    memory; a component whose plan fails is left out, with a line in ``notes`` saying why."""
    out: list[tuple[str, MemoryPart]] = []
    engine = registry.get(ENGINE, cfg.engine.name)
    labels = [f"{cfg.engine.name} engine" + (f" {i}" if cfg.engine.num_engines > 1 else "")
              for i in range(cfg.engine.num_engines)]
    for label, parts in zip(labels, [_parts_of(engine, cfg.engine.config, request, f"{cfg.engine.name} engine", notes)] * len(labels)):
        out += [(label, part) for part in parts]
    for name, slot in cfg.verifiers.items():
        if registry.has(VERIFIER, name):
            config = getattr(slot, "config", slot)
            out += [(f"{name} verifier", part)
                    for part in _parts_of(registry.get(VERIFIER, name), config, request, f"{name} verifier", notes)]
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


def plan_run(cfg: RunConfig, registry: ComponentRegistry, inputs: PlanInputs) -> RunPlan:
    """The memory plan of ``cfg`` (see the module docstring), with advice when it does not fit."""
    plan = _plan(cfg, registry, inputs)
    return plan if plan.fits else attrs.evolve(plan, advice=advice(cfg, registry, inputs, plan))


def _plan(cfg: RunConfig, registry: ComponentRegistry, inputs: PlanInputs) -> RunPlan:
    device = inputs.device
    learner_dev = "cuda:0" if device == "cuda" else "cpu"
    load = learner_load(cfg, inputs)
    notes = _notes(cfg, inputs)
    others = component_parts(cfg, registry, memory_request(cfg, inputs), notes)
    in_trainer = [(c, p) for c, p in others if not p.own_process]
    own = [(c, p) for c, p in others if p.own_process]
    single = cfg.learner.num_learners == 1 and cfg.distributed.backend == "local"
    trainer_extra = [Part(f"{c}: {p.name}", p.bytes, p.note) for c, p in in_trainer if not p.transient]
    trainer_transient = [Part(f"{c}: {p.name}", p.bytes, p.note) for c, p in in_trainer if p.transient]
    overlap = cfg.rollout.async_steps > 1
    # What else the learner's device holds beside a learner rank, for the budget: other processes'
    # parts there (a GPU's, or on the CPU the machine's memory).
    beside = sum(p.bytes for _, p in own if (p.device or learner_dev) == learner_dev)
    if single:
        beside += sum(p.bytes for p in trainer_extra) + (sum(p.bytes for p in trainer_transient) if overlap else 0.0)
    usable = usable_bytes(device, inputs.capacity)
    limit = cfg.learner.max_memory_gib * 2**30 if cfg.learner.max_memory_gib is not None else None
    if limit is not None:
        usable = min(usable, limit)
    most = largest_budget(load, usable, beside)
    most_lp = largest_logprob_budget(load, usable, beside)
    whole = inputs.micro_batches(0)[0]
    longest = rollout_shape(cfg).prompt_tokens + rollout_shape(cfg).response_tokens
    budget, source = _budget(cfg.learner.max_tokens_per_forward, min(max(most, longest), whole))
    lp_setting = cfg.learner.max_tokens_per_logprob_forward
    logprob_budget = (min(max(most_lp, longest), whole) if lp_setting == "auto" or (lp_setting is None and source == "auto")
                      else lp_setting if lp_setting is not None else 2 * budget)
    processes: list[ProcessPlan] = []
    if single:
        resident = trainer_extra + (trainer_transient if overlap else [])
        transient = [] if overlap else trainer_transient
        processes.append(learner_process(load, budget, logprob_budget, "trainer (learner" + (
            ", " + ", ".join(dict.fromkeys(c for c, _ in in_trainer)) if in_trainer else "") + ")",
            extra=resident, extra_transient=transient))
        processes[-1] = attrs.evolve(processes[-1], device=learner_dev)
    else:
        for rank in range(cfg.learner.num_learners):
            dev = f"cuda:{rank}" if device == "cuda" else "cpu"
            processes.append(attrs.evolve(learner_process(load, budget, logprob_budget, f"learner rank {rank}"), device=dev))
        if in_trainer:
            processes.append(ProcessPlan("trainer (" + ", ".join(dict.fromkeys(c for c, _ in in_trainer)) + ")",
                                         learner_dev, tuple(trainer_extra + trainer_transient)))
    for component in dict.fromkeys(c for c, _ in own):
        mine = [p for c, p in own if c == component]
        resident = tuple(Part(p.name, p.bytes, p.note) for p in mine if not p.transient)
        work = tuple(Part(p.name, p.bytes, p.note) for p in mine if p.transient)
        where = mine[0].device or learner_dev
        processes.append(ProcessPlan(f"{component} (own process)", where, resident, (("working", work),) if work else ()))
    capacity = {p.device: (inputs.host_capacity if p.device == "cpu" and device == "cuda" else inputs.capacity)
                for p in processes}
    rollout = rollout_shape(cfg)
    return RunPlan(
        processes=tuple(processes), capacity=capacity, budget=budget, logprob_budget=logprob_budget,
        budget_source=source, largest_budget=most, largest_logprob_budget=most_lp,
        longest_sequence=rollout.prompt_tokens + rollout.response_tokens,
        tokens_per_mini_batch=whole, limit=limit,
        notes=tuple(notes),
    )


def _budget(setting: int | str, largest: int) -> tuple[int, str]:
    if setting == "auto":
        return largest, "auto"
    return int(setting), "set"


def _notes(cfg: RunConfig, inputs: PlanInputs) -> list[str]:
    notes = []
    if inputs.device == "cuda":
        notes.append(f"CUDA: the plan fills at most {usable_bytes('cuda', 1.0):.0%} of a device's memory; the rest is "
                     "for the caching allocator's reserve and fragmentation, the CUDA context (about 0.5 GiB), "
                     "NCCL buffers and kernel workspaces, which no count sees")
    else:
        notes.append(f"CPU: the plan fills at most {usable_bytes('cpu', 1.0):.0%} of the memory available; the rest "
                     "is left to the system, the scoring and environment workers and the allocator's retained pages")
    if cfg.distributed.backend == "ray":
        notes.append("Ray: each engine and learner rank is an actor of its own; the plan lists them as processes")
    return notes


def advice(cfg: RunConfig, registry: ComponentRegistry, inputs: PlanInputs, plan: RunPlan) -> str:
    """One line: the first change that makes the run fit, and its peak (see ``docs/memory.md``)."""
    device = plan.processes[0].device
    need, room = plan.device_peak(device), plan.usable(device)
    what = f"needs {gib(need)} on {device} where {gib(room)} is usable ({gib(plan.capacity[device])})"
    if plan.largest_budget >= plan.longest_sequence and plan.budget_source == "set" and plan.budget > plan.largest_budget:
        return f"{what}; set learner.max_tokens_per_forward = {plan.largest_budget} (or \"auto\")"

    tries: list[tuple[str, RunConfig]] = []
    model = cfg.model
    if not model.gradient_checkpointing or model.gradient_checkpointing == "auto" and inputs.device == "cpu":
        tries.append(("set model.gradient_checkpointing = true", attrs.evolve(cfg, model=attrs.evolve(model, gradient_checkpointing=True))))
    if model.dtype == "float32" and model.lora is None:
        tries.append(('set model.dtype = "bfloat16" (and model.autocast = "none")',
                      attrs.evolve(cfg, model=attrs.evolve(model, dtype="bfloat16", autocast="none"))))
    if model.lora is None:
        tries.append(("train LoRA adapters ([model.lora] r = 16)", attrs.evolve(cfg, model=attrs.evolve(model, lora=LoraSection()))))
    if inputs.gpus > 1 and cfg.learner.num_learners == 1:
        sharded = attrs.evolve(cfg.learner, num_learners=inputs.gpus, strategy="fsdp2")
        tries.append((f'shard it over the {inputs.gpus} GPUs (learner.strategy = "fsdp2", learner.num_learners = '
                      f'{inputs.gpus})', attrs.evolve(cfg, learner=sharded)))
    for text, variant in tries:
        flipped = bool(variant.model.gradient_checkpointing is True) != bool(
            model.gradient_checkpointing is True or (model.gradient_checkpointing == "auto" and inputs.device == "cuda"))
        alt = _variant_plan(variant, registry, inputs, flipped)
        if alt.fits:
            return f"{what}; {text}: peak {gib(alt.device_peak(device))} at {alt.budget:,} tokens per forward"
    trainer = plan.processes[0]
    parts = [*trainer.resident] + [Part(name, sum(p.bytes for p in ps)) for name, ps in trainer.phases]
    largest = ", ".join(f"{p.name} {gib(p.bytes)}" for p in sorted(parts, key=lambda p: -p.bytes)[:3])
    tried = "gradient checkpointing, bfloat16 weights, LoRA" + (" or sharding over the GPUs" if inputs.gpus > 1 else "")
    where = ('shard it over more GPUs (--gpus N; learner.strategy = "fsdp2" or "deepspeed" with zero_stage = 3)'
             if inputs.device == "cuda" else "use a smaller model or batch")
    return (f"{what}; none of {tried} alone makes it fit (the largest parts: {largest}): {where}, "
            "or generate fewer sequences at once (the engine's batch, or the vllm engine)")


def _variant_plan(cfg: RunConfig, registry: ComponentRegistry, inputs: PlanInputs, flipped: bool) -> RunPlan:
    """The plan of a variant of the run (another dtype, checkpointing, LoRA) with an automatic
    budget. Its micro-batch costs are the run's (checkpointing: the other setting's): an upper
    bound for bfloat16 weights, whose activations are smaller."""
    costs = inputs.costs
    if flipped:
        costs = MicroBatchCosts(train=costs.train_other, train_other=costs.train, no_grad=costs.no_grad)
    auto = attrs.evolve(cfg, learner=attrs.evolve(cfg.learner, max_tokens_per_forward="auto"))
    return _plan(auto, registry, attrs.evolve(inputs, costs=costs))


def capacity_lines(plan: RunPlan) -> list[str]:
    """``device: peak of usable (capacity)``, one line per device."""
    return [f"{d}: {gib(plan.device_peak(d))} of {gib(plan.usable(d))} usable ({gib(c)})" for d, c in plan.capacity.items()]
