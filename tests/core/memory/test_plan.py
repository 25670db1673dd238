"""The plan's arithmetic for one learner process, with micro-batch costs given (no probe): the
first micro-batch's gradients, what a sharded strategy gathers, the pieces of a checkpointed
pass, LoRA's trainable parameters and the shape's unit sizes."""

from __future__ import annotations

import pytest
from transformers import LlamaConfig, LlamaForCausalLM

from grpo_run.core.config.schema import LoraSection
from grpo_run.core.memory.plan import ActivationCost, LearnerLoad, MicroBatchCosts, learner_process
from grpo_run.core.memory.run_plan import lora_params
from grpo_run.core.memory.shapes import ModelShape
from grpo_run.core.memory.states import StateLoad

COST = ActivationCost.linear(1000.0, 1e6)  # 1 kB a token, 1 MB fixed
COSTS = MicroBatchCosts(COST, COST, ActivationCost.linear(100.0, 0.0))


def _load(**over) -> LearnerLoad:
    states = StateLoad(**{**dict(params=1_000_000, param_bytes=4, trainable=1_000_000, trainable_bytes=4,
                                 head_params=100_000), **over})
    return LearnerLoad(states=states, device="cuda", costs=COSTS, tokens_per_rank=10_000,
                       micro_batches=lambda b: (b, b) if b else (10_000,))


def _parts(plan, phase=None) -> dict[str, float]:
    parts = plan.resident if phase is None else dict(plan.phases)[phase]
    return {p.name: p.bytes for p in parts}


def test_the_first_micro_batch_holds_only_the_output_layers_gradient() -> None:
    one = _parts(learner_process(_load(), 0, 0), "training micro-batch")  # one forward of 10,000 tokens
    assert one == {"gradients": 100_000 * 4, "activations": 1000.0 * 10_000 + 1e6}
    two = _parts(learner_process(_load(), 2000, 0), "training micro-batch")  # the second of two holds every gradient
    assert two == {"gradients": 4e6, "activations": 1000.0 * 2000 + 1e6}


def test_a_sharded_rank_holds_its_shard_and_the_units_it_gathers() -> None:
    # 4 fsdp2 ranks; 10 layers of 90k params and a root (embedding + head + norm) of 100k.
    plan = learner_process(_load(strategy="fsdp2", world_size=4, layer_params=90_000, root_params=100_000), 2000, 0)
    assert _parts(plan)["weights"] == 1e6 and _parts(plan)["optimizer state"] == 2e6
    training = _parts(plan, "training micro-batch")
    assert training["gradients"] == 1e6
    assert training["gathered weights"] == (100_000 + 2 * 90_000) * 4  # the root and two layers whole
    assert training["gathered gradients"] == (100_000 + 90_000) * 4  # the root's and one layer's before reduce-scatter


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
    assert shape.params == sum(p.numel() for p in LlamaForCausalLM(config).parameters())


@pytest.mark.parametrize("tied", [True, False])
def test_the_shape_knows_its_units(tied: bool) -> None:
    config = LlamaConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tied,
                         max_position_embeddings=77)
    shape = ModelShape.from_config(config)
    model = LlamaForCausalLM(config)
    assert shape.layer_params == sum(p.numel() for p in model.model.layers[0].parameters())
    assert shape.head_params == (0 if tied else 100 * 64)
    assert shape.root_params == shape.params - 3 * shape.layer_params == (1 if tied else 2) * 100 * 64 + 64
    assert shape.context == 77
