"""TRL's ``GRPOConfig`` (beyond the ``TrainingArguments`` it extends) and the ``trl grpo`` script
arguments."""

from __future__ import annotations

from grpo_run.core.config.peer_tables.entry import OMIT, NoEquivalentValue, Peer, key, mapped, no, says, truthy

_LOSSES = {"grpo": "grpo", "dr_grpo": "dr_grpo", "dapo": "dapo", "cispo": "cispo", "bnpo": "dapo"}
_MISMATCH = {"token_truncate": "token-truncate", "token_mask": "token-mask",
             "sequence_truncate": "sequence-truncate", "sequence_mask": "sequence-mask"}


def _scale_rewards(value: object) -> object:
    if value is True or value in ("group", "true", "True"):
        return "standard"
    if value is False or value in ("none", "false", "False"):
        return "centered"
    raise NoEquivalentValue(f"scale_rewards {value!r} has no equivalent: advantages are scaled per group or not at all")


TRL: dict[str, Peer] = {
    "num_generations": key("rollout.num_samples_per_prompt_rollout"),
    "num_generations_eval": key("eval.num_samples"),
    "max_completion_length": key("rollout.response_length"),
    "max_prompt_length": key("data.max_prompt_token_length"),
    "num_iterations": key("algorithm.num_epochs"),
    "epsilon": key("loss.clip_lower", ' in loss "dapo" (the default), loss.clip in "grpo" and "dr_grpo"'),
    "epsilon_high": key("loss.clip_higher"),
    "delta": key("loss.delta", " (the two-sided clip)"),
    "loss_type": key("loss.name", ': grpo, dr_grpo, dapo, cispo (bnpo is dapo on one device); sapo and luspo have no '
                     "equivalent", convert=mapped(_LOSSES, "loss_type")),
    "importance_sampling_level": key("loss.name", ' = "gspo" for "sequence"',
                                     convert=lambda v: "gspo" if v == "sequence" else OMIT),
    "scale_rewards": key("algorithm.advantage_normalization_type",
                         ': "group" (true) is "standard", "none" (false) "centered"; "batch" has no equivalent',
                         convert=_scale_rewards),
    "beta": key("kl.beta"),
    "reward_weights": says("verifiers.<name>.weight, one per reward"),
    "reward_funcs": says("a [verifiers.<name>] table per reward, or grpo_run.train(config, reward_funcs=[...])"),
    "multi_objective_aggregation": no("weighted scores are summed, then advantages normalised per group"),
    "sync_ref_model": key("kl.reference", ' = "polyak"', convert=lambda v: "polyak" if truthy(v) else OMIT),
    "ref_model_mixup_alpha": key("kl.alpha"),
    "ref_model_sync_steps": key("kl.ref_policy_update_freq"),
    "top_entropy_quantile": no("every loss token trains, whatever its entropy"),
    "use_liger_loss": no("the loss is computed chunk by chunk over the output layer anyway"),
    "generation_batch_size": says("rollout.num_unique_prompts_rollout", ", in prompts: generation_batch_size / num_generations"),
    "steps_per_generation": says("algorithm.num_mini_batches", ", over gradient_accumulation_steps"),
    "shuffle_dataset": key("sampler.shuffle"),
    "ds3_gather_for_generation": no("weights reach the engines in buckets of engine.weight_bucket_mb"),
    "use_vllm": key("engine.name", ' = "vllm"', convert=lambda v: "vllm" if truthy(v) else OMIT),
    "vllm_mode": no('the vllm engine runs in a worker process grpo-run starts; no separate server ("server" mode)'),
    "vllm_server_base_url": no("the vllm engine is a worker process grpo-run starts, not a server"),
    "vllm_server_host": no("the vllm engine is a worker process grpo-run starts, not a server"),
    "vllm_server_port": no("the vllm engine is a worker process grpo-run starts, not a server"),
    "vllm_server_timeout": key("engine.startup_timeout_s", also={"engine.name": "vllm"}),
    "vllm_group_port": no("weights travel through shared memory or vLLM's NCCL transfer (engine.weight_transfer)"),
    "vllm_enable_sleep_mode": key("engine.sleep_between_rollouts", also={"engine.name": "vllm"}),
    "vllm_max_model_length": key("engine.max_model_len", also={"engine.name": "vllm"}),
    "vllm_model_impl": no("vLLM loads the model with its own implementation"),
    "vllm_structured_outputs_regex": no("generation is not constrained"),
    "vllm_guided_decoding_regex": no("generation is not constrained"),
    "vllm_importance_sampling_correction": key("algorithm.mismatch_correction", ' (e.g. "sequence-mask")',
                                               convert=lambda v: "sequence-mask" if truthy(v) else "none"),
    "vllm_importance_sampling_mode": key("algorithm.mismatch_correction", convert=mapped(_MISMATCH, "mode")),
    "vllm_importance_sampling_cap": key("algorithm.mismatch_upper"),
    "off_policy_mask_threshold": no("no off-policy sequence mask by KL"),
    "use_bias_correction_kl": no("the KL estimate is not importance-weighted"),
    "sapo_temperature_neg": no("no SAPO loss"),
    "sapo_temperature_pos": no("no SAPO loss"),
    "max_tool_calling_iterations": key("environment.max_turns"),
    "log_completions": key("logging.log_rollouts_every", ", every how many steps (0 = never)",
                           convert=lambda v: 1 if truthy(v) else 0),
    "num_completions_to_print": no("completions go to rollouts/ (logging.log_rollouts_every), none to the console"),
    "log_unique_prompts": no("completions go to rollouts/ (logging.log_rollouts_every)"),
    "wandb_log_unique_prompts": no("completions go to rollouts/ (logging.log_rollouts_every)"),
    "log_completions_hub_repo": no("completions go to rollouts/ in the run directory"),
    "disable_dropout": no("the model's own dropout settings apply"),
    "cast_lm_head_to_fp32": no("the output layer runs in the model's dtype"),
    "model_init_kwargs": says("[model] keys: dtype, attn_implementation, revision, trust_remote_code"),
    "remove_unused_columns": no("rows keep every column; verifiers see the whole row"),
    "generation_kwargs": no("sampling takes rollout.temperature, rollout.top_p and rollout.stop_strings"),
    "chat_template_kwargs": no("the tokenizer's chat template is applied as it is"),
    "use_transformers_paged": no("the hf engine batches with transformers' generate"),
    "cache_implementation": no("the hf engine uses transformers' default cache"),
    "dataset_name": key("data.train.hf_dataset"),
    "dataset_config": key("data.train.subset"),
    "dataset_train_split": key("data.train.split"),
    "dataset_test_split": key("data.eval.split"),
    "num_processes": key("learner.num_learners"),
}
