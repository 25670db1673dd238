"""Where a run's memory lives: its processes, each on a device, with their parts.

The learner ranks take a device each (CUDA: rank ``r`` on GPU ``r``; all on the CPU otherwise);
the trainer process holds rank 0 when there is one rank and the backend is local, with the
components that run in it (the ``hf`` engine, verifiers without a process of their own). A
component in a process of its own (a vLLM worker, a reward model's scoring worker) sits where its
parts say, else where the run places it: with the local backend on the model's device, with Ray
(every engine an actor) an engine that asks for GPUs gets the next GPUs after the learners'.
What a rank offloads (ZeRO or FSDP2 offloading) and what a sleeping vLLM keeps on the host are
counted on ``"cpu"``.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from grpo_run.core.config.schema import RunConfig
from grpo_run.core.memory.plan import LearnerLoad, host_parts, learner_process
from grpo_run.core.memory.plan_parts import Part, ProcessPlan
from grpo_run.core.plugins.types import MemoryPart


@attrs.frozen
class Component:
    """A component's parts in the plan: ``label`` (``"vllm engine 1"``), whether it is an engine."""

    label: str
    parts: tuple[MemoryPart, ...]
    engine: bool = False
    index: int = 0
    """The engine's index (0 for a run with one engine)."""


def plan_processes(cfg: RunConfig, load: LearnerLoad, components: Sequence[Component], budget: int,
                   logprob_budget: int) -> list[ProcessPlan]:
    """Every process of ``cfg`` with its parts, under the given token budgets."""
    cuda = load.device == "cuda"
    ray = cfg.distributed.backend == "ray"
    learners = cfg.learner.num_learners
    model_device = "cuda:0" if cuda else "cpu"
    if ray:  # every engine is an actor of its own
        components = [attrs.evolve(c, parts=tuple(attrs.evolve(p, own_process=True) for p in c.parts))
                      if c.engine else c for c in components]
    in_trainer = [(c, p) for c in components for p in c.parts if not p.own_process]
    beside = [(c, p) for c, p in in_trainer if (p.device or model_device) == model_device]
    processes: list[ProcessPlan] = []
    if learners == 1 and not ray:  # the trainer process holds the learner
        overlap = cfg.rollout.async_steps > 1
        extra = [_part(c, p) for c, p in beside if not p.transient or overlap]
        transient = [_part(c, p) for c, p in beside if p.transient and not overlap]
        names = ", ".join(dict.fromkeys(c.label for c, _ in beside))
        trainer = learner_process(load, budget, logprob_budget, "trainer (learner" + (f", {names}" if names else "") + ")",
                                  extra=extra, extra_transient=transient)
        processes.append(attrs.evolve(trainer, device=model_device))
        apart = [(c, p) for c, p in in_trainer if (p.device or model_device) != model_device]
    else:
        for rank in range(learners):
            dev = f"cuda:{rank}" if cuda else "cpu"
            processes.append(attrs.evolve(learner_process(load, budget, logprob_budget, f"learner rank {rank}", rank=rank),
                                          device=dev))
        apart = in_trainer
    by_device: dict[str, list[tuple[Component, MemoryPart]]] = {}
    for c, p in apart:  # the trainer's components on a device of their own (or beside learner ranks)
        by_device.setdefault(p.device or model_device, []).append((c, p))
    if not (learners == 1 and not ray) and not cuda and load.runtime_bytes:
        by_device.setdefault("cpu", [])  # the driver is a process of its own on the CPU
    for where, parts in by_device.items():
        resident = tuple(_part(c, p) for c, p in parts if not p.transient)
        if where == "cpu" and not cuda and not (learners == 1 and not ray) and load.runtime_bytes:
            resident = (Part("runtime", load.runtime_bytes, "interpreter, torch and libraries"), *resident)
        work = tuple(_part(c, p) for c, p in parts if p.transient)
        names = ", ".join(dict.fromkeys(c.label for c, _ in parts))
        processes.append(ProcessPlan("trainer" + (f" ({names})" if names else ""),
                                     where, resident, (("generation", work),) if work else (),
                                     adds_up=("generation",) if where == "cpu" and work else (),
                                     role="engine" if any(c.engine for c, _ in parts) else "other"))
    next_gpu = learners if ray and cuda else 0
    for component in components:
        own = [p for p in component.parts if p.own_process]
        if not own:
            continue
        devices: dict[str, list[MemoryPart]] = {}
        for part in own:
            first = part.device or _placed(cfg, component, model_device, next_gpu)
            for dev in _spread(first, part.spread):
                devices.setdefault(dev, []).append(part)
        if ray and cuda and component.engine and _asks_gpus(cfg) and not any(p.device for p in own):
            next_gpu += max(p.spread for p in own)
        for dev, parts in devices.items():
            resident = tuple(Part(p.name, p.bytes, p.note) for p in parts if not p.transient)
            work = tuple(Part(p.name, p.bytes, p.note) for p in parts if p.transient)
            name = f"{component.label} (own process)" + (f" on {dev}" if len(devices) > 1 else "")
            processes.append(ProcessPlan(name, dev, resident, (("working", work),) if work else (),
                                         reserves=all(p.reserved for p in parts),
                                         role="engine" if component.engine else "other"))
    host = host_parts(load)
    if host:
        for rank in range(learners):
            processes.append(ProcessPlan(f"learner rank {rank} (offloaded)", "cpu", host, role="other"))
    if load.sync is not None and load.sync_on_host and load.sync.bytes:
        processes.append(ProcessPlan("weight sync (gathered on rank 0's host)", "cpu", (), (("weight sync", (load.sync,)),),
                                     role="other"))
    return processes


def _part(component: Component, part: MemoryPart) -> Part:
    return Part(f"{component.label}: {part.name}", part.bytes, part.note)


def _asks_gpus(cfg: RunConfig) -> bool:
    resources = cfg.distributed.resources_of("engine")
    return resources.num_gpus >= 1


def _placed(cfg: RunConfig, component: Component, model_device: str, next_gpu: int) -> str:
    """Where the run puts a component in a process of its own that names no device."""
    if cfg.distributed.backend == "ray" and component.engine and model_device != "cpu" and _asks_gpus(cfg):
        return f"cuda:{next_gpu}"
    return model_device


def _spread(first: str, spread: int) -> list[str]:
    if spread <= 1 or not first.startswith("cuda"):
        return [first]
    index = int(first.split(":")[1]) if ":" in first else 0
    return [f"cuda:{index + i}" for i in range(spread)]
