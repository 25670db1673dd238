"""A learner rank's model states by strategy, counted without DeepSpeed or a GPU: what each
data-parallel strategy splits, and ZeRO's figures held to DeepSpeed's own estimators where
DeepSpeed is installed."""

from __future__ import annotations

import pytest

from grpo_run.core.memory.states import StateLoad, model_states

P = 1_000_000


def _states(**over):
    base = dict(params=P, param_bytes=4, trainable=P, trainable_bytes=4, world_size=4, head_params=0)
    return model_states(StateLoad(**{**base, **over}))


def _resident(states) -> dict[str, float]:
    return {p.name: p.bytes for p in states.resident}


@pytest.mark.parametrize(("strategy", "stage", "weights", "grads", "optimizer"), [
    ("single", 0, 4 * P, 4 * P, 8 * P),
    ("ddp", 0, 4 * P, 8 * P, 8 * P),  # the gradients and DDP's buckets
    ("fsdp2", 0, P, P, 2 * P),
    ("deepspeed", 1, 4 * P, 4 * P, 2 * P),
    ("deepspeed", 2, 4 * P, P, 2 * P),
    ("deepspeed", 3, P, P, 2 * P),
])
def test_float32_strategies_split_what_they_shard(strategy, stage, weights, grads, optimizer) -> None:
    states = _states(strategy=strategy, stage=stage)
    assert _resident(states)["weights"] == weights and _resident(states)["optimizer state"] == optimizer
    assert sum(p.bytes for p in states.gradients) == grads
    assert "master weights" not in _resident(states)  # float32 weights are their own master copy


def test_16_bit_zero_keeps_float32_master_weights_and_state() -> None:
    states = _states(param_bytes=2, trainable_bytes=2, strategy="deepspeed", stage=2)
    resident = _resident(states)
    assert resident["weights"] == 2 * P and resident["master weights"] == P and resident["optimizer state"] == 2 * P
    assert sum(p.bytes for p in states.gradients) == 6 * P / 4  # 16-bit and float32, partitioned


def test_a_sharded_reference_is_held_per_rank() -> None:
    whole = _resident(_states(strategy="fsdp2", reference_bytes=2))["reference policy"]
    sharded = _resident(_states(strategy="fsdp2", reference_bytes=2, reference_sharded=True))["reference policy"]
    assert whole == 2 * P and sharded == 2 * P / 4


def test_offloaded_optimizer_state_lives_on_the_host() -> None:
    states = _states(strategy="deepspeed", stage=3, offload_optimizer=True)
    assert "optimizer state" not in _resident(states)
    assert {p.name for p in states.host} == {"optimizer state"}


def _model_states_bytes(states) -> float:
    """Weights, master weights, optimizer state and gradients, plus the gathered layer: what
    DeepSpeed's estimators count."""
    return (sum(p.bytes for p in states.resident) + sum(p.bytes for p in states.gradients)
            + sum(p.bytes for p in states.gathered))


@pytest.mark.heavy
@pytest.mark.parametrize("gpus", [8, 16])
def test_zero_figures_match_deepspeeds_estimators(gpus: int) -> None:
    """Qwen2.5-7B's parameter counts (7.6B; the largest layer is the 545M-parameter embedding)."""
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    params, largest = 7_615_616_512, 545_000_000
    base = dict(params=params, param_bytes=2, trainable=params, trainable_bytes=2, world_size=gpus,
                strategy="deepspeed", layer_params=largest)
    _, zero3 = estimate_zero3_model_states_mem_needs(params, largest, num_gpus_per_node=gpus, cpu_offload=False,
                                                     cpu_offload_params=False)[:2]
    _, zero2 = estimate_zero2_model_states_mem_needs(params, num_gpus_per_node=gpus, cpu_offload=False)
    ours3 = _model_states_bytes(model_states(StateLoad(**base, stage=3)))
    ours2 = _model_states_bytes(model_states(StateLoad(**base, stage=2)))
    assert ours3 == pytest.approx(zero3, rel=1e-6)
    assert ours2 == pytest.approx(zero2, rel=1e-6)


def test_a_sweeps_variants_hold_an_adapter_and_optimizer_state_each_and_the_base_once() -> None:
    # LoRA: 10,000 trainable float32 parameters per adapter on a 1M-parameter base; 4 variants.
    lora = dict(params=P, param_bytes=4, trainable=10_000, trainable_bytes=4, world_size=1, strategy="single")
    one, four = _states(**lora), _states(**lora, variants=4)
    assert _resident(four)["weights"] == _resident(one)["weights"] == 4 * P  # the base, once
    assert _resident(four)["LoRA adapters"] == 4 * 40_000 and _resident(one)["LoRA adapters"] == 40_000
    assert _resident(four)["optimizer state"] == 4 * 80_000  # AdamW: 2 x 4 bytes per parameter, per variant
    assert [p.bytes for p in four.gradients] == [p.bytes for p in one.gradients] == [40_000]  # one variant's at a time
