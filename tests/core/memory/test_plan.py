"""The plan's arithmetic, part by part, with micro-batch costs given (no probe): what data-parallel
strategies split, LoRA's trainable parameters, the first micro-batch's gradients, the largest
budget that fits, and the pieces of a checkpointed pass."""

from __future__ import annotations

import pytest
from transformers import LlamaConfig

from grpo_run.core.config.schema import LoraSection
from grpo_run.core.memory.plan import ActivationCost, LearnerLoad, MicroBatchCosts, largest_budget, learner_process
from grpo_run.core.memory.run_plan import lora_params
from grpo_run.core.memory.shapes import ModelShape

COST = ActivationCost.linear(1000.0, 1e6)  # 1 kB a token, 1 MB fixed
COSTS = MicroBatchCosts(COST, COST, ActivationCost.linear(100.0, 0.0))


def _load(**over) -> LearnerLoad:
    base = dict(params=1_000_000, param_bytes=4, trainable=1_000_000, trainable_bytes=4, reference=False,
                device="cuda", costs=COSTS, tokens_per_rank=10_000, micro_batches=lambda b: (b, b) if b else (10_000,),
                head_params=100_000)
    return LearnerLoad(**{**base, **over})


def _parts(plan, phase=None) -> dict[str, float]:
    parts = plan.resident if phase is None else dict(plan.phases)[phase]
    return {p.name: p.bytes for p in parts}


@pytest.mark.parametrize(("strategy", "shard", "weights", "grads", "states"), [
    ("ddp", "none", 4e6, 4e6, 8e6),
    ("zero-1", "optimizer", 4e6, 4e6, 2e6),
    ("zero-2", "gradients", 4e6, 1e6, 2e6),
    ("fsdp2 / zero-3", "all", 1e6, 1e6, 2e6),
])
def test_data_parallel_strategies_split_what_they_shard(strategy, shard, weights, grads, states) -> None:
    plan = learner_process(_load(world_size=4, shard=shard, ddp=strategy == "ddp"), 2000, 0)
    assert _parts(plan)["weights"] == weights and _parts(plan)["optimizer state"] == states
    training = _parts(plan, "training micro-batch")
    assert training["gradients"] == grads
    assert ("DDP gradient buckets" in training) == (strategy == "ddp")


def test_the_first_micro_batch_holds_only_the_output_layers_gradient() -> None:
    one = _parts(learner_process(_load(), 0, 0), "training micro-batch")  # one forward of 10,000 tokens
    assert one == {"gradients": 100_000 * 4, "activations": 1000.0 * 10_000 + 1e6}
    two = _parts(learner_process(_load(), 2000, 0), "training micro-batch")  # the second of two holds every gradient
    assert two == {"gradients": 4e6, "activations": 1000.0 * 2000 + 1e6}


def test_the_largest_budget_fills_what_is_usable_and_no_more() -> None:
    load = _load(head_params=500_000)
    resident = learner_process(load, 0, 0).resident_bytes
    usable = resident + 4e6 + 1e6 + 1000.0 * 6400  # gradients + fixed + 6,400 tokens
    assert largest_budget(load, usable) == 6400
    assert largest_budget(load, usable - 1) == 6336  # a token short: down to the multiple of 64 below
    assert largest_budget(load, resident) == 0  # nothing left for a micro-batch
    # One forward of the whole mini-batch holds only the output layer's gradient: it fits sooner.
    assert largest_budget(load, resident + 2e6 + 1e6 + 1000.0 * 10_000) == 10_000


def test_a_checkpointed_pass_costs_the_larger_of_its_two_moments() -> None:
    cost = ActivationCost(((100.0, 1e9), (300.0, 0.0)))  # the output layer's chunks, then a layer recomputed
    assert cost.at(1000) == 1e9 + 1e5 and cost.at(10**7) == 3e9
    assert cost.largest_tokens(1.5e9) == 5_000_000  # the second piece binds first
    assert cost.largest_tokens(5e8) == 0  # not even the first piece's fixed part


def test_lora_trains_the_adapters_of_the_targeted_layers_only() -> None:
    config = LlamaConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2)
    shape = ModelShape.from_config(config)
    # Per layer: q (64 -> 64), k and v (64 -> 32), o (64 -> 64), gate and up (64 -> 128), down (128 -> 64).
    per_layer = 8 * ((64 + 64) + 2 * (64 + 32) + (64 + 64) + 2 * (64 + 128) + (128 + 64))
    assert lora_params(shape, LoraSection(r=8)) == 2 * per_layer
    assert lora_params(shape, LoraSection(r=8, target_modules=("q_proj",))) == 2 * 8 * (64 + 64)
    assert lora_params(shape, LoraSection(r=8, target_modules=("q_proj",), layers_to_transform=(1,))) == 8 * (64 + 64)
    assert shape.params == sum(p.numel() for p in __import__("transformers").LlamaForCausalLM(config).parameters())
