"""The memory plan where a run is built: the model's shape from its config, the learner's
micro-batch costs measured on fake tensors, and the share of the plan an ``"auto"`` token budget
is chosen from (:class:`~grpo_run.core.memory.budget.BudgetPlan`)."""

from __future__ import annotations

import functools
from typing import Any

import attrs

from grpo_run.core.config.schema import RunConfig
from grpo_run.core.errors import ConfigError, UserError
from grpo_run.core.learner.probe import activation_costs, micro_batches
from grpo_run.core.learner.spec import LearnerSpec
from grpo_run.core.loop.preflight import context_issues
from grpo_run.core.memory.budget import AUTO, BudgetPlan
from grpo_run.core.memory.plan import LearnerLoad, MicroBatchCosts, activation_bound, gib
from grpo_run.core.memory.run_plan import PlanInputs, RunPlan, learner_load, plan_run, rollout_shape
from grpo_run.core.memory.shapes import ModelShape, shape_problems
from grpo_run.core.memory.states import model_states
from grpo_run.core.plugins.registry import ComponentRegistry
from grpo_run.core.runlog import get_logger

LOADED_PARTS = ("weights", "LoRA adapters", "reference policy")
"""Parts a learner has loaded by the time it chooses its budget."""


def model_config(path: str, cfg: RunConfig) -> Any:
    """The transformers config of the model at ``path`` (its ``config.json``: no weights); a shape
    no model has is refused in one line before anything is built."""
    import json
    from pathlib import Path

    from transformers import AutoConfig

    local = Path(path) / "config.json"
    if local.is_file():
        try:
            raw = json.loads(local.read_text())
        except (OSError, ValueError) as exc:
            raise UserError(f"{local}: cannot read it: {exc}") from None
        problems = shape_problems(raw) if isinstance(raw, dict) else ["not a JSON object"]
        if problems:
            raise UserError(f"{local}: {problems[0]}")
    try:
        return AutoConfig.from_pretrained(path, revision=cfg.model.revision, trust_remote_code=cfg.model.trust_remote_code)
    except Exception as exc:  # noqa: BLE001 -- transformers' and huggingface_hub's errors vary; one line either way
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise UserError(f"model {path!r}: cannot read its config.json: {first}") from None


def plan_inputs(cfg: RunConfig, spec: LearnerSpec, config: Any, *, device: str, capacity: float,
                runtime_bytes: float = 0.0, gpus: int = 1, both_checkpointing: bool = True,
                costs: MicroBatchCosts | None = None, shape: ModelShape | None = None,
                host_capacity: float | None = None) -> PlanInputs:
    """Everything :func:`~grpo_run.core.memory.run_plan.plan_run` needs besides the config, the
    learner's costs measured on fake tensors (``device``: ``"cuda"`` or ``"cpu"``); with
    ``both_checkpointing`` the other checkpointing setting's costs too, measured when first asked;
    ``host_capacity``: the host's memory (default: this machine's available memory)."""
    import psutil

    rollout = rollout_shape(cfg)
    shape = shape or ModelShape.from_config(config, source=f"model {cfg.model.name_or_path!r}")
    if costs is None:
        costs = activation_costs(spec, config, rollout, device=device, other=False)
    other = None
    if both_checkpointing:
        flipped = attrs.evolve(spec, model=attrs.evolve(spec.model, gradient_checkpointing=not spec.model.gradient_checkpointing))
        other = functools.cache(lambda: activation_costs(flipped, config, rollout, device=device, other=False))
    return PlanInputs(
        shape=shape, costs=costs, device=device, capacity=capacity,
        host_capacity=float(psutil.virtual_memory().available) if host_capacity is None else host_capacity,
        micro_batches=micro_batches(rollout, cfg.algorithm.num_mini_batches, cfg.learner.num_learners),
        runtime_bytes=runtime_bytes, gpus=gpus, other_costs=other,
    )


def with_budget_plan(cfg: RunConfig, registry: ComponentRegistry, spec: LearnerSpec, model_path: str) -> LearnerSpec:
    """``spec`` with its share of the memory plan (for an ``"auto"`` budget, and the planned peak
    each step reports), or, where even a generous upper bound of a whole mini-batch fits, with no
    bound for an ``"auto"`` budget and no plan (said in the log). The console line, if any, is the
    learner's, once it has chosen."""
    import psutil

    config = model_config(model_path, cfg)
    device = "cuda" if spec.model.device.startswith("cuda") else "cpu"
    capacity = _capacity(spec.model.device)
    runtime = float(psutil.Process().memory_info().rss) if device == "cpu" else 0.0
    shape = ModelShape.from_config(config, source=f"model {cfg.model.name_or_path!r}")
    issues = context_issues(cfg, shape.context)
    if issues:
        raise ConfigError("config", issues)
    bound = activation_bound(shape.hidden, shape.intermediate, shape.q_dim, shape.kv_dim, shape.layers, shape.vocab)
    rough = plan_inputs(cfg, spec, config, device=device, capacity=capacity, runtime_bytes=runtime,
                        costs=MicroBatchCosts(bound, bound, bound), shape=shape, both_checkpointing=False)
    plan = plan_run(cfg, registry, rough)
    whole = rough.micro_batches(0)[0]
    if plan.largest_budget >= whole and plan.largest_logprob_budget >= whole:
        if AUTO not in (spec.forward_tokens, spec.logprob_forward_tokens):
            return spec
        budgets = {"forward_tokens": 0 if spec.forward_tokens == AUTO else spec.forward_tokens,
                   "logprob_forward_tokens": 0 if spec.logprob_forward_tokens == AUTO else spec.logprob_forward_tokens}
        device_name = plan.processes[0].device
        line = (f"token budget: none needed: a whole mini-batch ({whole:,} tokens) needs at most "
                f"{gib(plan.device_peak(device_name))} of {gib(plan.usable(device_name))} usable")
        get_logger().info("token_budget", tokens=0, line=line)  # the log only: nothing for the console to say
        return attrs.evolve(spec, **budgets)
    inputs = plan_inputs(cfg, spec, config, device=device, capacity=capacity, runtime_bytes=runtime,
                         both_checkpointing=False, shape=shape)
    plan = plan_run(cfg, registry, inputs)
    return attrs.evolve(spec, budget_plan=budget_plan(plan, learner_load(cfg, inputs), whole, cfg.learner.max_memory_gib))


def budget_plan(plan: RunPlan, load: LearnerLoad, whole: int, limit: float | None = None) -> BudgetPlan:
    """Rank 0's share of ``plan``: its own parts, and what the other processes on its device hold
    (every rank holds the same)."""
    learner = plan.processes[0]
    here = [p for p in plan.processes if p.device == learner.device and p is not learner]
    peers = [p for p in here if p.role == "learner"]
    engines = sum(p.phase_peak for p in here if p.role == "engine")
    others = sum(p.phase_peak for p in here if p.role == "other")
    resident = sum(p.bytes for p in learner.resident if p.name != "runtime") + sum(p.resident_bytes for p in here) + others
    loaded = sum(p.bytes for p in learner.resident if p.name in LOADED_PARTS)
    states = model_states(load.states)
    gradients = sum(p.bytes for p in states.gradients)
    own_other = max((sum(p.bytes for p in parts) for name, parts in learner.phases
                     if name not in ("training micro-batch", "log-prob pass", *learner.adds_up)), default=0.0)
    resident += sum(learner.phase_bytes(name) for name in learner.adds_up)
    if plan.turns:
        other = max(own_other, engines)
    else:
        other, resident = own_other, resident + engines
    return BudgetPlan(resident=resident, loaded=loaded, gradients=gradients, train=load.costs.train,
                      no_grad=load.costs.no_grad, longest_sequence=plan.longest_sequence, whole_mini_batch=whole,
                      other_peak=other, first_gradients=states.first_gradients,
                      limit=limit * 2**30 if limit is not None else None,
                      gathered=sum(p.bytes for p in states.gathered), gathered_no_grad=states.gathered_no_grad,
                      ranks=1 + len(peers),
                      optimizer_state=sum(p.bytes for p in learner.resident if p.name in ("optimizer state", "master weights")))


def _capacity(device: str) -> float:
    """One CUDA device's total memory, or the RAM available now."""
    if device.startswith("cuda"):
        import torch

        return float(torch.cuda.get_device_properties(torch.device(device).index or 0).total_memory)
    import psutil

    return float(psutil.virtual_memory().available)
