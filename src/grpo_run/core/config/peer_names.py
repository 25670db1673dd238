"""Hints for unknown keys: what a key means in TRL, verl or Open Instruct, and where a grpo-run
key put in the wrong table belongs.

``learning_rate`` at the top level gets "(grpo-run calls it optim.lr)"; ``beta`` in ``[rollout]``
gets "(it is a key of [kl]: kl.beta)". Consulted only when no key of the table itself is a
close spelling (a typo's "did you mean" wins).
"""

from __future__ import annotations

import functools
import typing

import attrs

from grpo_run.core.config.schema import KLSlot, PluginSlot, RunConfig

PEER_NAMES: dict[str, str] = {
    # TRL (GRPOConfig / TrainingArguments)
    "learning_rate": "optim.lr",
    "num_generations": "rollout.num_samples_per_prompt_rollout",
    "per_device_train_batch_size": "rollout.num_unique_prompts_rollout: prompts per step, each sampled "
                                   "rollout.num_samples_per_prompt_rollout times",
    "gradient_accumulation_steps": "algorithm.num_mini_batches, the other way round: a rollout batch is "
                                   "one step, split into that many optimizer steps",
    "beta": "kl.beta",
    "max_completion_length": "rollout.response_length",
    "max_prompt_length": "data.max_prompt_token_length",
    "num_iterations": "algorithm.num_epochs",
    "epsilon": "loss.clip_lower in dapo, loss.clip in grpo and dr_grpo",
    "epsilon_high": "loss.clip_higher",
    "loss_type": "loss.name",
    "scale_rewards": 'algorithm.advantage_normalization_type: "standard" scales, "centered" does not',
    "max_steps": "train.total_steps",
    "lr_scheduler_type": "optim.lr_scheduler",
    "warmup_ratio": "optim.warmup_steps, a number of steps",
    "save_steps": "checkpoint.save_freq",
    "eval_steps": "train.local_eval_every",
    "model_name_or_path": "model.name_or_path",
    "torch_dtype": "model.dtype",
    "bf16": 'model.autocast = "bfloat16" for fp32 master weights, or model.dtype = "bfloat16" for pure bf16',
    "use_vllm": 'engine.name = "vllm"',
    "reward_weights": "verifiers.<name>.weight",
    "reward_funcs": "a [verifiers.<name>] table per reward",
    "hub_model_id": "checkpoint.push_to_hub.repo_id",
    "hub_private_repo": "checkpoint.push_to_hub.private",
    "use_peft": "a [model.lora] table",
    "lora_r": "model.lora.r",
    "lora_alpha": "model.lora.alpha",
    "lora_dropout": "model.lora.dropout",
    "lora_target_modules": "model.lora.target_modules",
    # verl (the last part of its dotted keys)
    "ppo_epochs": "algorithm.num_epochs",
    "ppo_mini_batch_size": "algorithm.num_mini_batches, a count of mini-batches, not their size",
    "clip_ratio": "loss.clip_lower in dapo, loss.clip in grpo and dr_grpo",
    "clip_ratio_low": "loss.clip_lower",
    "clip_ratio_high": "loss.clip_higher",
    "kl_loss_coef": 'kl.beta, with kl.placement = "loss"',
    "kl_coef": 'kl.beta, with kl.placement = "reward"',
    "use_kl_loss": 'kl.beta > 0 with kl.placement = "loss"',
    "kl_loss_type": "kl.name",
    "loss_agg_mode": "algorithm.loss_aggregation",
    "total_training_steps": "train.total_steps",
    "total_epochs": "train.total_steps, a number of steps",
    "train_batch_size": "rollout.num_unique_prompts_rollout",
    "max_response_length": "rollout.response_length",
    "test_freq": "train.local_eval_every",
    "norm_adv_by_std_in_grpo": 'algorithm.advantage_normalization_type: "standard" or "centered"',
    "grad_clip": "optim.max_grad_norm",
    # Open Instruct (most of its keys have the same name here, in a table)
    "kl_estimator": "kl.name",
    "total_episodes": "train.total_steps, a number of steps: episodes / (prompts x samples per step)",
    "warm_up_steps": "optim.warmup_steps",
    "apply_verifiable_reward": "a [verifiers.<name>] table",
    "dataset_mixer_list": "[[data.train]] sources, each with a path or hf_dataset and a weight or rows",
    "with_tracking": "a [trackers.<name>] table",
}
"""A peer framework's key -> where its meaning lives in grpo-run."""


def unknown_key_hint(key: str) -> str:
    """`` (grpo-run calls it optim.lr)`` or `` (it is a key of [kl]: kl.beta)``, else ``""``."""
    if key in PEER_NAMES:
        return f" (grpo-run calls it {PEER_NAMES[key]})"
    homes = _section_keys().get(key, [])
    if not homes:
        return ""
    tables = " and ".join(f"[{home.rpartition('.')[0]}]" for home in homes)
    return f" (it is a key of {tables}: {', '.join(homes)})"


@functools.cache
def _section_keys() -> dict[str, list[str]]:
    """Every key of every fixed section (nested tables included) -> its dotted paths."""
    index: dict[str, list[str]] = {}

    def add(cls: type, prefix: str) -> None:
        hints = typing.get_type_hints(cls)
        for f in attrs.fields(cls):
            if f.name == "config" and cls is KLSlot:
                continue
            index.setdefault(f.name, []).append(f"{prefix}.{f.name}")
            nested = next((t for t in (hints[f.name], *typing.get_args(hints[f.name])) if attrs.has(t)), None)
            if nested is not None and nested is not PluginSlot:
                add(nested, f"{prefix}.{f.name}")

    hints = typing.get_type_hints(RunConfig)
    for f in attrs.fields(RunConfig):
        section = next((t for t in (hints[f.name], *typing.get_args(hints[f.name])) if attrs.has(t)), None)
        if section is not None and section is not PluginSlot:
            add(section, f.name)
    return index
