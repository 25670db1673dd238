"""The memory plan where a run is built: the model's shape from its config, the learner's
micro-batch costs measured on fake tensors, and the share of the plan an ``"auto"`` token budget
is chosen from (:class:`~grpo_run.core.memory.budget.BudgetPlan`)."""

from __future__ import annotations

from typing import Any

import attrs

from grpo_run.core.config.schema import RunConfig
from grpo_run.core.errors import UserError
from grpo_run.core.learner.probe import activation_costs, micro_batches
from grpo_run.core.learner.spec import LearnerSpec
from grpo_run.core.memory.budget import AUTO, BudgetPlan
from grpo_run.core.memory.plan import LearnerLoad, MicroBatchCosts, activation_bound, gib, training_parts, usable_bytes
from grpo_run.core.memory.run_plan import PlanInputs, RunPlan, learner_load, plan_run, rollout_shape
from grpo_run.core.memory.shapes import ModelShape
from grpo_run.core.plugins.registry import ComponentRegistry
from grpo_run.core.runlog import get_logger

LOADED_PARTS = ("weights", "LoRA adapters", "reference policy")
"""Parts a learner has loaded by the time it chooses its budget."""


def model_config(path: str, cfg: RunConfig) -> Any:
    """The transformers config of the model at ``path`` (its ``config.json``: no weights)."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(path, revision=cfg.model.revision, trust_remote_code=cfg.model.trust_remote_code)
    except (OSError, ValueError) as exc:
        raise UserError(f"model {path!r}: cannot read its config.json: {exc}") from None


def plan_inputs(cfg: RunConfig, spec: LearnerSpec, config: Any, *, device: str, capacity: float,
                runtime_bytes: float = 0.0, gpus: int = 1, both_checkpointing: bool = True,
                costs: MicroBatchCosts | None = None) -> PlanInputs:
    """Everything :func:`~grpo_run.core.memory.run_plan.plan_run` needs besides the config, the
    learner's costs measured on fake tensors (``device``: ``"cuda"`` or ``"cpu"``)."""
    rollout = rollout_shape(cfg)
    if costs is None:
        costs = activation_costs(spec, config, rollout, device=device, other=both_checkpointing)
    import psutil

    return PlanInputs(
        shape=ModelShape.from_config(config), costs=costs, device=device, capacity=capacity,
        host_capacity=float(psutil.virtual_memory().available),
        micro_batches=micro_batches(rollout, cfg.algorithm.num_mini_batches, cfg.learner.num_learners),
        runtime_bytes=runtime_bytes, gpus=gpus,
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
    if cfg.learner.max_memory_gib is not None:  # planned as if the device had only that much usable
        capacity = min(capacity, cfg.learner.max_memory_gib * 2**30 / usable_bytes(device, 1.0))
    runtime = float(psutil.Process().memory_info().rss) if device == "cpu" else 0.0
    shape = ModelShape.from_config(config)
    bound = activation_bound(shape.hidden, shape.intermediate, shape.q_dim, shape.kv_dim, shape.layers, shape.vocab)
    rough = plan_inputs(cfg, spec, config, device=device, capacity=capacity, runtime_bytes=runtime,
                        costs=MicroBatchCosts(bound, bound, bound))
    plan = plan_run(cfg, registry, rough)
    whole = rough.micro_batches(0)[0]
    if plan.largest_budget >= whole and plan.largest_logprob_budget >= whole:
        if AUTO not in (spec.forward_tokens, spec.logprob_forward_tokens):
            return spec
        budgets = {"forward_tokens": 0 if spec.forward_tokens == AUTO else spec.forward_tokens,
                   "logprob_forward_tokens": 0 if spec.logprob_forward_tokens == AUTO else spec.logprob_forward_tokens}
        line = (f"token budget: none needed: a whole mini-batch ({whole:,} tokens) needs at most "
                f"{gib(plan.device_peak(plan.processes[0].device))} of {gib(usable_bytes(device, capacity))} usable")
        get_logger().info("token_budget", tokens=0, line=line)  # the log only: nothing for the console to say
        return attrs.evolve(spec, **budgets)
    inputs = plan_inputs(cfg, spec, config, device=device, capacity=capacity, runtime_bytes=runtime,
                         both_checkpointing=False)
    return attrs.evolve(spec, budget_plan=budget_plan(plan_run(cfg, registry, inputs), learner_load(cfg, inputs), whole,
                                                  cfg.learner.max_memory_gib))


def budget_plan(plan: RunPlan, load: LearnerLoad, whole: int, limit: float | None = None) -> BudgetPlan:
    """Rank 0's share of ``plan`` (every rank holds the same)."""
    learner = plan.processes[0]
    resident = sum(p.bytes for p in learner.resident if p.name != "runtime")
    loaded = sum(p.bytes for p in learner.resident if p.name in LOADED_PARTS)
    gradients = sum(p.bytes for p in training_parts(load, (1, 1))[:-1])
    first = sum(p.bytes for p in training_parts(load, (1,))[:-1])
    other = max((sum(p.bytes for p in parts) for name, parts in learner.phases
                 if name not in ("training micro-batch", "log-prob pass", *learner.adds_up)), default=0.0)
    resident += sum(learner.phase_bytes(name) for name in learner.adds_up)
    return BudgetPlan(resident=resident, loaded=loaded, gradients=gradients, train=load.costs.train,
                      no_grad=load.costs.no_grad, longest_sequence=plan.longest_sequence, whole_mini_batch=whole,
                      other_peak=other, first_gradients=first,
                      limit=limit * 2**30 if limit is not None else None)


def _capacity(device: str) -> float:
    """One CUDA device's total memory, or the RAM available now."""
    if device.startswith("cuda"):
        import torch

        return float(torch.cuda.get_device_properties(torch.device(device).index or 0).total_memory)
    import psutil

    return float(psutil.virtual_memory().available)
