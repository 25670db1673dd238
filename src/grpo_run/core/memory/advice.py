"""What to change when a run does not fit: the fewest changes, as ``--set KEY=VALUE`` lines.

Each :class:`Lever` is one way to need less memory (gradient checkpointing, bfloat16 weights or
reference, a smaller engine batch, the engine on a GPU of its own, sharding over more ranks,
LoRA, no reference policy ...), with its settings from the mildest to the strongest, and is only
offered where it is not already in force. :func:`advise` tries sets of levers, fewest first and
milder levers before stronger ones, and returns the first set whose plan fits -- each lever at its
mildest setting that still fits. Trying a set costs one plan at the smallest budget (arithmetic:
the micro-batch costs were measured once), so the search takes well under a second; only gradient
checkpointing, when offered, measures its own costs first. Levers that need more GPUs than the
machine has are tried last, and their answer says how many.
"""

from __future__ import annotations

import itertools
import tomllib
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from grpo_run.core.config.schema import LoraSection, RunConfig
from grpo_run.core.memory.plan import MicroBatchCosts
from grpo_run.core.memory.plan_parts import Part, gib
from grpo_run.core.memory.run_plan import PlanInputs, RunPlan, plan_run, reference_bytes
from grpo_run.core.plugins.registry import ComponentRegistry

MAX_CHANGES = 4
"""Levers combined at most."""


@attrs.frozen
class Lever:
    """One way to need less memory: its settings, mildest first, each a tuple of ``KEY=VALUE``."""

    what: str
    settings: tuple[tuple[str, ...], ...]
    more_gpus: int = 0
    """GPUs the lever needs (0: no more than the machine has)."""


@attrs.frozen
class Advice:
    """What to change: the overrides, and the plan with them."""

    overrides: tuple[str, ...]
    plan: RunPlan
    gpus: int
    levers: tuple[Lever, ...] = ()
    """GPUs the changed run needs (more than the machine's when no set fits on it)."""


def advise(cfg: RunConfig, registry: ComponentRegistry, inputs: PlanInputs, plan: RunPlan,
           accept: Callable[[tuple[str, ...]], bool] | None = None) -> RunPlan:
    """``plan`` with its :attr:`~RunPlan.advice` line and, where a set of changes makes the run
    fit, its :attr:`~RunPlan.suggested` overrides. ``accept``: a last check of a fitting set (the
    CLI re-reads the config with it, so every suggestion passes the config's own rules)."""
    device = _fullest(plan)
    what = (f"needs {gib(plan.device_peak(device))} on {device} where {gib(plan.usable(device))} is usable "
            f"({gib(plan.capacity[device])})") if plan.device_peak(device) > plan.usable(device) else ""
    if plan.problems:
        what = "; ".join(filter(None, [what, *plan.problems]))
    elif plan.gpus_used > plan.gpus and plan.device_peak(device) <= plan.usable(device):
        what = f"uses {plan.gpus_used} GPUs where {plan.gpus} are given (--gpus)"
    elif not what:
        what = f"not even one sequence of {plan.longest_sequence:,} tokens fits a forward"
    found = search(cfg, registry, inputs, levers(cfg, inputs, plan), accept)
    if found is None:
        parts = _largest_parts(plan)
        return attrs.evolve(plan, advice=f"{what}; no combination of the changes grpo-run knows fits "
                                         f"(the largest parts: {parts}): use a smaller model or batch")
    peak = max(found.plan.device_peak(d) for d in found.plan.capacity)
    where = f" on {found.gpus} GPUs (--gpus {found.gpus})" if found.gpus > inputs.gpus and inputs.device == "cuda" else ""
    line = (f"{what}; it fits{where} with {len(found.levers)} change{'s' if len(found.levers) > 1 else ''}"
            f" ({', '.join(lever.what for lever in found.levers)}): peak {gib(peak)}, "
            f"{found.plan.budget:,} tokens per forward")
    return attrs.evolve(plan, advice=line, suggested=found.overrides)


def search(cfg: RunConfig, registry: ComponentRegistry, inputs: PlanInputs, offered: Sequence[Lever],
           accept: Callable[[tuple[str, ...]], bool] | None = None) -> Advice | None:
    """The first set of levers (fewest, then mildest) whose plan fits; ``None`` if none does."""
    here = [lever for lever in offered if not lever.more_gpus]
    beyond = [lever for lever in offered if lever.more_gpus]
    for pool, extra in ((here, []), (here, beyond)):
        for size in range(1, MAX_CHANGES + 1):
            for combo in _combinations(pool, extra, size):
                chosen = _fit(cfg, registry, inputs, combo, accept)
                if chosen is not None:
                    return chosen
    return None


def _combinations(pool: Sequence[Lever], extra: Sequence[Lever], size: int):
    """Sets of ``size`` levers in order of preference; with ``extra``, each set holds exactly one of them."""
    if not extra:
        yield from itertools.combinations(pool, size)
        return
    for lever in extra:
        for rest in itertools.combinations(pool, size - 1):
            yield (*rest, lever)


def _fit(cfg: RunConfig, registry: ComponentRegistry, inputs: PlanInputs, combo: Sequence[Lever],
         accept: Callable[[tuple[str, ...]], bool] | None) -> Advice | None:
    """``combo`` at its strongest; if that fits, each lever eased to its mildest setting that still fits."""
    chosen = [len(lever.settings) - 1 for lever in combo]
    if _trial(cfg, registry, inputs, combo, chosen) is None:
        return None
    for i, lever in enumerate(combo):
        for mild in range(len(lever.settings) - 1):
            if _trial(cfg, registry, inputs, combo, [*chosen[:i], mild, *chosen[i + 1:]]) is not None:
                chosen[i] = mild
                break
    overrides = tuple(o for lever, i in zip(combo, chosen) for o in lever.settings[i])
    if accept is not None and not accept(overrides):
        return None
    plan = _trial(cfg, registry, inputs, combo, chosen, full=True)
    if plan is None:
        return None
    return Advice(overrides, plan, max([inputs.gpus, *(lever.more_gpus for lever in combo)]), tuple(combo))


def _trial(cfg: RunConfig, registry: ComponentRegistry, inputs: PlanInputs, combo: Sequence[Lever],
           chosen: Sequence[int], full: bool = False) -> RunPlan | None:
    overrides = [o for lever, i in zip(combo, chosen) for o in lever.settings[i]]
    try:
        variant = apply_overrides(cfg, overrides)
    except (ValueError, TypeError, KeyError):  # a combination the config's own rules refuse
        return None
    gpus = max([inputs.gpus, *(lever.more_gpus for lever in combo)])
    trial_inputs = attrs.evolve(inputs, gpus=gpus, costs=_costs_of(cfg, variant, inputs))
    plan = plan_run(variant, registry, trial_inputs, quick=not full)
    return plan if plan.fits else None


def _costs_of(cfg: RunConfig, variant: RunConfig, inputs: PlanInputs) -> MicroBatchCosts:
    """The variant's micro-batch costs: the run's, or the other checkpointing setting's (measured
    once, when first needed). bfloat16 weights keep the run's: an upper bound."""
    if _checkpointing(variant, inputs.device) == _checkpointing(cfg, inputs.device) or inputs.other_costs is None:
        return inputs.costs
    return inputs.other_costs()


def _checkpointing(cfg: RunConfig, device: str) -> bool:
    setting = cfg.model.gradient_checkpointing
    return device == "cuda" if setting == "auto" else bool(setting)


def levers(cfg: RunConfig, inputs: PlanInputs, plan: RunPlan) -> list[Lever]:
    """The levers not already in force for ``cfg``, mildest kinds first."""
    m, learner, engine = cfg.model, cfg.learner, cfg.engine
    cuda = inputs.device == "cuda"
    out: list[Lever] = []
    if learner.max_tokens_per_forward != "auto" and plan.largest_budget < int(learner.max_tokens_per_forward or 2**62):
        out.append(Lever("the automatic token budget", (("learner.max_tokens_per_forward=\"auto\"",),)))
    if not _checkpointing(cfg, inputs.device) and inputs.other_costs is not None:
        out.append(Lever("gradient checkpointing", (("model.gradient_checkpointing=true",),)))
    batch = getattr(engine.config, "max_batch_size", None)
    if isinstance(batch, int) and batch > 8:
        sizes = [b for b in (128, 64, 32, 16, 8) if b < batch]
        out.append(Lever("a smaller engine batch", tuple((f"engine.max_batch_size={b}",) for b in sizes)))
    if cuda and reference_bytes(cfg, "cuda") > 2:
        out.append(Lever("a bfloat16 reference policy", (('kl.reference_dtype="bfloat16"',),)))
    if cuda and m.dtype == "float32" and m.lora is None:
        out.append(Lever("bfloat16 weights", (('model.dtype="bfloat16"', 'model.autocast="none"'),)))
    out += _placement_levers(cfg, inputs)
    if m.lora is None:
        out.append(Lever("LoRA adapters", (("model.lora.r=16",),)))
    if cfg.kl.beta > 0 and cfg.kl.reference != "none" and m.lora is None:
        out.append(Lever("no reference policy (no KL penalty)", (("kl.beta=0.0",),)))
    return out


def _placement_levers(cfg: RunConfig, inputs: PlanInputs) -> list[Lever]:
    """Sharding over more ranks, and the engine on a GPU of its own (CUDA)."""
    if inputs.device != "cuda":
        return []
    learner, gpus = cfg.learner, inputs.gpus
    out: list[Lever] = []
    in_trainer_engine = cfg.engine.name == "hf" and cfg.distributed.backend == "local"
    if in_trainer_engine and getattr(cfg.engine.config, "device", "auto") == "auto" and gpus >= 2:
        spare = learner.num_learners if learner.num_learners < gpus else gpus - 1
        settings = [(f'engine.device="cuda:{spare}"',)]
        if learner.num_learners >= gpus:
            settings = [(f"learner.num_learners={gpus - 1}", f'engine.device="cuda:{gpus - 1}"')]
        out.append(Lever("the engine on a GPU of its own", tuple(settings)))
    sharded = learner.strategy == "fsdp2" or (learner.strategy == "deepspeed" and learner.stage == 3)
    if not sharded and learner.num_learners > 1:
        out.append(Lever("sharded weights", (('learner.strategy="fsdp2"',),)))
    if learner.num_learners < gpus:
        settings = tuple((f"learner.num_learners={n}",) + (() if sharded else ('learner.strategy="fsdp2"',))
                         for n in sorted({min(gpus, 2 * learner.num_learners), gpus}))
        out.append(Lever(f"sharding over the {gpus} GPUs", settings))
    for factor in (2, 4):
        n = max(gpus, learner.num_learners) * factor
        out.append(Lever(f"{n} GPUs", ((f"learner.num_learners={n}",) + (() if sharded else ('learner.strategy="fsdp2"',)),),
                         more_gpus=n + max(0, gpus - learner.num_learners)))
    return out


def apply_overrides(cfg: RunConfig, overrides: Sequence[str]) -> RunConfig:
    """``cfg`` with ``KEY=VALUE`` overrides (TOML values) set on its sections and plugin configs,
    the keys of one table together (so that fields checked against each other change at once)."""
    tree: dict[str, Any] = {}
    for override in overrides:
        key, _, text = override.partition("=")
        *parents, leaf = key.split(".")
        node = tree
        for name in parents:
            node = node.setdefault(name, {})
        node[leaf] = tomllib.loads(f"v = {text}")["v"]
    return _with(cfg, tree)


_NEW_TABLES = {"lora": LoraSection}


def _with(obj: Any, changes: dict[str, Any]) -> Any:
    fields = attrs.fields_dict(type(obj)) if attrs.has(type(obj)) else {}
    mine: dict[str, Any] = {}
    theirs: dict[str, Any] = {}
    for name, value in changes.items():
        if name not in fields:
            theirs[name] = value
        elif isinstance(value, dict):
            child = getattr(obj, name)
            mine[name] = _with(child if child is not None else _NEW_TABLES[name](), value)
        else:
            current = getattr(obj, name)
            mine[name] = tuple(value) if isinstance(current, tuple) and isinstance(value, list) else value
    if theirs:  # a plugin slot's own options
        config = getattr(obj, "config", None)
        if config is None or not attrs.has(type(config)):
            raise KeyError(".".join(theirs))
        mine["config"] = _with(config, theirs)
    return attrs.evolve(obj, **mine)


def _fullest(plan: RunPlan) -> str:
    return max(plan.capacity, key=lambda d: plan.device_peak(d) / max(1.0, plan.usable(d)))


def _largest_parts(plan: RunPlan) -> str:
    device = _fullest(plan)
    parts: list[Part] = []
    for process in plan.processes:
        if process.device == device:
            parts += [*process.resident] + [Part(name, sum(p.bytes for p in ps)) for name, ps in process.phases]
    return ", ".join(f"{p.name} {gib(p.bytes)}" for p in sorted(parts, key=lambda p: -p.bytes)[:3])
