"""The peer frameworks' configurations and key names the seed documents give (/work/shared/seeds:
Open Instruct's grpo_fast documents, ROLL's configuration guide), as test data.

``OPEN_INSTRUCT_KEYS``: every argument name the Open Instruct documents name (the
``StreamingDataLoaderConfig`` signature, the experiment settings, the workflow's knobs).
``ROLL_KEYS``: every key path ROLL's guide names, the example YAML's and those its prose lists.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
OPEN_INSTRUCT_KWARGS = HERE / "open_instruct_streaming.py"
OPEN_INSTRUCT_SCRIPT = HERE / "open_instruct_grpo_fast.sh"
ROLL_YAML = HERE / "roll_rlvr_config.yaml"

OPEN_INSTRUCT_KEYS = (
    # StreamingDataLoaderConfig (its signature and key-field table)
    "max_prompt_token_length", "response_length", "pack_length", "async_steps", "num_samples_per_prompt_rollout",
    "num_unique_prompts_rollout", "active_sampling", "filter_zero_std_samples", "no_resampling_pass_rate",
    "advantage_normalization_type", "mask_truncated_completions", "mask_tool_use", "dataset_mixer_list",
    "dataset_mixer_eval_list", "dataset_transform_fn", "temperature", "stop_strings", "inflight_updates",
    "apply_verifiable_reward", "verification_reward", "apply_r1_style_format_reward", "r1_style_format_reward",
    "max_possible_score", "save_traces",
    # the experiment configuration: optimization, algorithm, batch, distributed, checkpoints, tracking
    "learning_rate", "lr_scheduler_type", "warm_up_steps", "weight_decay", "max_grad_norm", "fused_optimizer",
    "beta", "clip_lower", "clip_higher", "loss_fn", "kl_estimator", "loss_denominator", "ref_policy_update_freq",
    "alpha", "per_device_train_batch_size", "total_episodes", "num_mini_batches", "num_epochs",
    "num_learners_per_node", "deepspeed_stage", "deepspeed_zpg", "sequence_parallel_size",
    "deepspeed_offload_param", "deepspeed_offload_optimizer", "gather_whole_model", "save_freq",
    "checkpoint_state_freq", "checkpoint_state_dir", "output_dir", "push_to_hub", "hf_repo_id", "gs_bucket_path",
    "with_tracking", "wandb_project_name", "wandb_entity", "verbose", "local_eval_every", "backend_timeout",
    "single_gpu_mode", "enable_queue_dashboard", "queue_dashboard_port", "use_vllm_logprobs",
    "truncated_importance_sampling_ratio_cap", "load_ref_policy",
    # the workflow: placement, generation, rewards, evaluation
    "vllm_num_engines", "vllm_tensor_parallel_size", "vllm_top_p", "non_stop_penalty", "gradient_checkpointing",
    "record_entropy", "try_launch_beaker_eval_jobs_on_weka",
)

ROLL_KEYS = (
    "rollout_batch_size", "prompt_length", "response_length", "num_return_sequences_in_group",
    "actor_train.model_args.dtype", "actor_train.model_args.disable_gradient_checkpointing",
    "actor_train.model_args.ulysses_size",
    "actor_train.training_args.learning_rate", "actor_train.training_args.weight_decay",
    "actor_train.training_args.per_device_train_batch_size", "actor_train.training_args.gradient_accumulation_steps",
    "actor_train.training_args.warmup_steps",
    "actor_train.data_args.template", "actor_train.data_args.file_name", "actor_train.data_args.prompt",
    "actor_train.data_args.messages",
    "actor_train.strategy_args.strategy_name",
    *(f"actor_train.strategy_args.strategy_config.{name}" for name in (
        "tensor_model_parallel_size", "pipeline_model_parallel_size", "expert_model_parallel_size",
        "context_parallel_size", "virtual_pipeline_model_parallel_size", "sequence_parallel", "recompute_granularity",
        "moe_layer_recompute", "moe_token_dispatcher_type", "moe_grouped_gemm", "moe_shared_expert_overlap",
        "overlap_grad_reduce", "fsdp_size", "param_dtype", "reduce_dtype", "reshard_after_forward", "offload_policy")),
    "actor_train.infer_batch_size", "actor_train.device_mapping",
    "actor_infer.generating_args.max_new_tokens", "actor_infer.generating_args.temperature",
    "actor_infer.strategy_args.strategy_name",
    *(f"actor_infer.strategy_args.strategy_config.{name}" for name in (
        "gpu_memory_utilization", "block_size", "max_model_len", "load_format", "mem_fraction_static")),
    "actor_infer.num_gpus_per_worker", "actor_infer.device_mapping",
    "reference.model_args", "reference.strategy_args", "reference.device_mapping",
)
