"""ROLL's ``rlvr_config`` YAML: its top-level pipeline keys and the worker tables ``actor_train``,
``actor_infer`` and ``reference`` (``model_args``, ``training_args``, ``data_args``,
``generating_args``, ``strategy_args``) that the hint looks into key by key.

Entries are tails of key paths: ``actor_infer.generating_args.temperature`` matches
``generating_args.temperature``; a longer tail wins (``validation.generating_args.temperature``
is the evaluation's).
"""

from __future__ import annotations

from grpo_run.core.config.peer_tables.entry import OMIT, NoEquivalentValue, Peer, inverted, key, mapped, no, says, table, truthy

_MEGATRON = "no Megatron-style model parallelism: learners are data-parallel (learner.strategy: ddp, fsdp2, deepspeed)"
_PLACEMENT = ("where workers run follows from learner.num_learners and engine.num_engines, and with Ray from "
              "the [distributed] resources (docs/scale-out.md); there is no device list")
_REFERENCE = "the reference policy is the starting model, held beside the learner in model.dtype (kl.reference)"
_TRAIN_STRATEGIES = {"fsdp2_train": "fsdp2", "deepspeed_train": "deepspeed"}
_INFER_STRATEGIES = {"vllm": "vllm", "hf_infer": "hf"}



def _group_statistic(value: object, what: str) -> object:
    """ROLL's normalisation statistics: per group, or none."""
    if value == "group":
        return "standard" if what == "norm_std_type" else OMIT
    if value is None and what == "norm_std_type":
        return "centered"
    if value is None:
        raise NoEquivalentValue("norm_mean_type none leaves the reward uncentred; grpo-run always subtracts the "
                                "group's mean")
    raise NoEquivalentValue(f"{what} {value!r} has no equivalent: advantages are normalised per group")


ROLL: dict[str, Peer] = {
    # pipeline
    "rollout_batch_size": key("rollout.num_unique_prompts_rollout"),
    "num_return_sequences_in_group": key("rollout.num_samples_per_prompt_rollout"),
    "prompt_length": key("data.max_prompt_token_length"),
    "sequence_length": no("prompt and completion are bounded apart: data.max_prompt_token_length, rollout.response_length"),
    "val_prompt_length": no("evaluations use data.max_prompt_token_length"),
    "val_sequence_length": no("evaluations use data.max_prompt_token_length and rollout.response_length"),
    "pretrain": key("model.name_or_path"),
    "reward_pretrain": says("verifiers.reward_model.model", " for a reward model (ROLL's rule-based rewards use it as a tokenizer only)"),
    "value_clip": no("GRPO has no critic, so no value clipping"),
    "reward_clip": no("rewards are not clipped: each verifier declares its score range"),
    "advantage_clip": no("advantages are not clipped"),
    "dual_clip_loss": key("loss.delta", ': the dual clip of loss "dapo", "grpo" or "dr_grpo" (ROLL\'s is at '
                          "1 + 2 x pg_clip)"),
    "norm_mean_type": key("algorithm.advantage_normalization_type",
                          ': group mean and std is "standard", group mean alone "centered"; batch and running '
                          "statistics have no equivalent", convert=lambda v: _group_statistic(v, "norm_mean_type")),
    "norm_std_type": key("algorithm.advantage_normalization_type",
                         ': "group" is "standard", none is "centered"; batch and running statistics have no equivalent',
                         convert=lambda v: _group_statistic(v, "norm_std_type")),
    "whiten_advantages": no("advantages are normalised per group (algorithm.advantage_normalization_type), "
                            "not whitened over the batch"),
    "whiten_rewards": no("rewards are not whitened; advantages are normalised per group"),
    "use_reward_scaling": no("rewards are not rescaled (scoring.verification_reward multiplies them)"),
    "use_reward_norm": no("rewards are not normalised; advantages are, per group"),
    "reward_norm": no("rewards are not normalised; advantages are, per group"),
    "reward_shift": no("rewards are not shifted"),
    "reward_scale": key("scoring.verification_reward"),
    "add_len_reward": says("a [verifiers.length] table"),
    "max_len_mask": key("algorithm.mask_truncated_completions"),
    "mask_type": no("truncated completions get no loss at all with algorithm.mask_truncated_completions"),
    "difficulty_mask": no("prompts are not masked by difficulty: algorithm.filter_zero_std_samples drops groups "
                          "that all pass or all fail, and sampler \"active\" retires solved prompts"),
    "difficulty_low_threshold": no("prompts are not masked by difficulty"),
    "difficulty_high_threshold": no("prompts are not masked by difficulty (sampler.no_resampling_pass_rate retires "
                                    "prompts solved that often, for good)"),
    "error_max_len_clip": no("no length-based reward clipping (verifiers.length penalises over-long completions)"),
    "error_max_len_threshold": no("no length-based reward clipping (verifiers.length penalises over-long completions)"),
    "difficulty_loss_weight": no("every loss token weighs the same (algorithm.loss_aggregation)"),
    "length_loss_weight": no("every loss token weighs the same (algorithm.loss_aggregation)"),
    "add_token_level_kl": key("kl.placement", ' = "reward" (the KL estimate is subtracted from the reward)',
                              convert=lambda v: "reward" if truthy(v) else OMIT),
    "init_kl_coef": key("kl.beta", also={"kl.placement": "reward"}),
    "pg_clip": key("loss.clip_lower", ' and loss.clip_higher (loss "dapo"); loss.clip in "grpo" and "dr_grpo"'),
    "pg_clip_low": key("loss.clip_lower"),
    "pg_clip_high": key("loss.clip_higher"),
    "use_pg_clip_range": key("loss.clip_lower", ' and loss.clip_higher (loss "dapo")', convert=lambda v: OMIT),
    "enable_reference": key("kl.reference", ' = "none" when false', convert=lambda v: "frozen" if truthy(v) else "none"),
    "enable_old_logprobs_recompute": key("algorithm.use_engine_logprobs_as_old", ", the other way round",
                                         convert=inverted),
    "async_generation_ratio": says("rollout.async_steps", ", whole batches generated ahead rather than a fraction"),
    "use_additional_prompts": key("sampler.name", ' = "active" (it refills the batch with groups that have a '
                                  "reward spread)", convert=lambda v: "active" if truthy(v) else OMIT),
    "is_use_additional_prompts": key("sampler.name", ' = "active"', convert=lambda v: "active" if truthy(v) else OMIT),
    "max_running_requests": key("engine.max_num_seqs", also={"engine.name": "vllm"}),
    "is_num_return_sequences_expand": no("the engine samples a prompt's group in one request"),
    "max_ckpt_to_keep": key("checkpoint.keep_last_n"),
    "track_with": says("a [trackers.<name>] table (tensorboard, wandb, mlflow)"),
    "tracker_kwargs": table("ROLL's tracker options"),
    "tracker_kwargs.log_dir": key("trackers.tensorboard.log_dir"),
    "tracker_kwargs.project": key("trackers.wandb.project"),
    "tracker_kwargs.tags": key("trackers.wandb.tags"),
    "tracker_kwargs.notes": no("the W&B run has no notes; trackers.wandb.tags labels it"),
    "tracker_kwargs.api_key": no("W&B reads its key from WANDB_API_KEY or `wandb login`"),
    "checkpoint_config": table("ROLL's checkpoint storage"),
    "checkpoint_config.output_dir": key("checkpoint.dir"),
    "checkpoint_config.type": no("checkpoints go to a local directory (checkpoint.dir)"),
    "system_envs": no("set environment variables in the shell that starts grpo-run"),
    "hydra": no("Hydra's own settings: grpo-run reads one TOML file, with --set for overrides"),
    "num_gpus_per_node": no("Ray reads each node's GPUs; actors ask for theirs in [distributed] resources"),
    "rpc_timeout": key("distributed.startup_timeout_s"),
    "model_update_buffer_size_mb": key("engine.weight_bucket_mb", also={"engine.name": "vllm"}),
    "profiler_timeline": no("no built-in profiler"),
    "profiler_memory": no("grpo-run plan estimates the memory beforehand (docs/memory.md)"),
    "rewards": says("a [verifiers.<name>] table per reward (math_rule -> math, ifeval -> ifeval, code_sandbox -> "
                    "code, llm_judge -> judge, a reward model -> reward_model)"),
    "reward_model": says("a [verifiers.reward_model] table"),
    "reference": table("ROLL's reference worker"),
    "actor_train": table("ROLL's training worker"),
    "actor_infer": table("ROLL's generation worker"),
    "validation": table("ROLL's validation worker"),
    "val_greedy": no("evaluations are greedy, plus eval.num_samples sampled completions"),
    "val_n_sample": key("eval.num_samples"),
    # worker tables
    "model_args": table("ROLL's model arguments"),
    "training_args": table("ROLL's training arguments"),
    "data_args": table("ROLL's data arguments"),
    "generating_args": table("ROLL's generation arguments"),
    "strategy_args": table("ROLL's strategy"),
    "strategy_config": table("ROLL's strategy settings"),
    "model_args.dtype": key("model.dtype", ': fp32 -> "float32", bf16 -> "bfloat16", fp16 -> "float16"',
                            convert=mapped({"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}, "dtype")),
    "actor_infer.model_args.dtype": key("engine.dtype", also={"engine.name": "vllm"},
                                        convert=mapped({"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"},
                                                       "dtype")),
    "disable_gradient_checkpointing": key("model.gradient_checkpointing", ", the other way round", convert=inverted),
    "actor_infer.model_args.disable_gradient_checkpointing": no("generation computes no gradients"),
    "model_args.model_type": no("the model's type comes from its config"),
    "model_args.flash_attn": says("model.attn_implementation", ': "sdpa" (PyTorch\'s fused kernels) or "eager"'),
    "model_args.ulysses_size": no("no sequence parallelism: a sequence is computed on one learner"),
    "model_args.device_map": no("the learner's device is model.device"),
    "reference.model_args": no(_REFERENCE),
    "reference.strategy_args": no(_REFERENCE + ", sharded as the learner is"),
    "reference.data_args": no("the reference scores the training batch"),
    "reference.device_mapping": no(_REFERENCE),
    "reference.infer_batch_size": says("learner.max_tokens_per_logprob_forward", ", a token budget rather than a count"),
    "data_args.template": key("data.apply_chat_template", ': "native" is the tokenizer\'s own chat template (true); '
                              "named templates have no equivalent",
                              convert=mapped({"native": True}, "template")),
    "data_args.file_name": key("data.train.path", ": one [[data.train]] source per file"),
    "validation.data_args.file_name": key("data.eval.path", ": one [[data.eval]] source per file"),
    "data_args.eval_file_name": key("data.eval.path"),
    "data_args.prompt": key("data.train.prompt_key"),
    "data_args.messages": key("data.train.messages_key"),
    "data_args.response": no("rows hold a prompt and a ground truth (data.train.ground_truth_key)"),
    "data_args.id": key("data.train.id_key"),
    "data_args.tag": key("data.train.verifier_key", ": the column naming each row's verifier"),
    "data_args.domain_interleave_probs": key("sampler.weights", " (sampler \"mixture\": a weight per source)",
                                             also={"sampler.name": "mixture"}),
    "data_args.interleave_probs": says("data.train.weight", ", one per source"),
    "data_args.dataset_dir": no("source paths are relative to the working directory"),
    "data_args.dataset_type": says("data.train.format", " (a file format: jsonl, json, parquet, csv)"),
    "actor_infer.data_args": no("generation uses the training rows"),
    "generating_args.temperature": key("rollout.temperature"),
    "generating_args.top_p": key("rollout.top_p"),
    "generating_args.stop_strings": key("rollout.stop_strings"),
    "validation.generating_args.temperature": key("eval.temperature"),
    "validation.generating_args.num_return_sequences": key("eval.num_samples"),
    "validation.generating_args.max_new_tokens": key("rollout.response_length", ": evaluations use the same"),
    "validation.generating_args.top_p": no("evaluations are greedy, and pass@k samples at eval.temperature"),
    "validation.eval_steps": key("train.local_eval_every"),
    "actor_train.strategy_args.strategy_name": key(
        "learner.strategy", ': fsdp2_train -> "fsdp2", deepspeed_train -> "deepspeed"; megatron_train has no equivalent',
        convert=mapped(_TRAIN_STRATEGIES, "strategy_name")),
    "actor_infer.strategy_args.strategy_name": key(
        "engine.name", ': vllm -> "vllm", hf_infer -> "hf"; sglang has no equivalent',
        convert=mapped(_INFER_STRATEGIES, "strategy_name")),
    "tensor_model_parallel_size": no(_MEGATRON),
    "pipeline_model_parallel_size": no(_MEGATRON),
    "expert_model_parallel_size": no(_MEGATRON),
    "context_parallel_size": no(_MEGATRON),
    "virtual_pipeline_model_parallel_size": no(_MEGATRON),
    "strategy_config.sequence_parallel": no(_MEGATRON),
    "use_distributed_optimizer": no(_MEGATRON + "; optimizer state is sharded by fsdp2 and deepspeed"),
    "recompute_granularity": key("model.gradient_checkpointing", ': "full" is true; "selective" has no equivalent',
                                 convert=mapped({"full": True}, "recompute_granularity")),
    "moe_layer_recompute": no(_MEGATRON),
    "moe_token_dispatcher_type": no(_MEGATRON),
    "moe_grouped_gemm": no(_MEGATRON),
    "moe_shared_expert_overlap": no(_MEGATRON),
    "overlap_grad_reduce": no(_MEGATRON),
    "fsdp_size": no('learner.strategy = "fsdp2" shards over every learner (no replica groups)'),
    "param_dtype": key("model.autocast", ': bf16 parameters over fp32 masters is model.autocast = "bfloat16"',
                       convert=mapped({"bf16": "bfloat16", "bfloat16": "bfloat16"}, "param_dtype")),
    "reduce_dtype": no("gradients are reduced in the dtype they are kept in"),
    "reshard_after_forward": no("fsdp2 reshards after every forward"),
    "offload_policy": key("learner.offload_params"),
    "strategy_config.gpu_memory_utilization": key("engine.gpu_memory_utilization", also={"engine.name": "vllm"}),
    "strategy_config.max_model_len": key("engine.max_model_len", also={"engine.name": "vllm"}),
    "strategy_config.block_size": no("vLLM's KV block size is left at its default"),
    "strategy_config.load_format": no("the engine loads the starting weights, then receives every update"),
    "mem_fraction_static": no("no SGLang engine (engine.gpu_memory_utilization is vLLM's share)"),
    "device_mapping": no(_PLACEMENT),
    "num_gpus_per_worker": key("engine.tensor_parallel_size", ": GPUs per engine", also={"engine.name": "vllm"}),
    "actor_train.infer_batch_size": says("learner.max_tokens_per_logprob_forward", ", a token budget rather than a count"),
    "actor_infer.infer_batch_size": no("the engine batches a whole rollout's requests"),
    "infer_batch_size": no("passes are sized by tokens (learner.max_tokens_per_logprob_forward), and the engine "
                           "batches a whole rollout's requests"),
    "worker_cls": no("components are plugins found through entry points, or named as module:Class"),
    "use_dynamic_batching_in_train": says("learner.max_tokens_per_forward", ": micro-batches are always sized by tokens"),
    "max_tokens_per_microbatch_in_train": key("learner.max_tokens_per_forward"),
    "use_sequence_packing": says("algorithm.pack_length", ": sequences are always packed, into rows of pack_length tokens"),
}
