"""Open Instruct's ``grpo_fast`` arguments (``GRPOExperimentConfig``, ``StreamingDataLoaderConfig``,
``VLLMConfig``, ``ModelConfig``, ``TokenizerConfig``, older ``Args``).

Most of its GRPO names are grpo-run's too, in a table (``num_unique_prompts_rollout`` is
``rollout.num_unique_prompts_rollout``): those need no entry, the hint finds the table. This
table holds the names that differ.
"""

from __future__ import annotations

from grpo_run.core.config.peer_tables.entry import NoEquivalentValue, Peer, enables, inverted, key, mapped, no, says, truthy

_KL = {"kl1": "k1", "kl2": "k2", "kl3": "k3", 0: "k1", 1: "k2", 2: "k3", "0": "k1", "1": "k2", "2": "k3"}
_BEAKER = "Ai2's Beaker cluster integration"


def _stage(value: object) -> object:
    stage = int(value)  # type: ignore[call-overload]
    if stage == 0:
        raise NoEquivalentValue("deepspeed_stage 0 is plain data parallelism: learner.strategy \"ddp\" (the default with several learners)")
    return stage


OPEN_INSTRUCT: dict[str, Peer] = {
    # batch and length
    "total_episodes": says("train.total_steps",
                           ", a number of steps: episodes / (num_unique_prompts_rollout x num_samples_per_prompt_rollout)"),
    "num_training_steps": key("train.total_steps"),
    "max_train_steps": key("train.total_steps"),
    "max_token_length": no("prompt and completion are bounded apart: data.max_prompt_token_length, rollout.response_length"),
    "max_seq_length": no("prompt and completion are bounded apart: data.max_prompt_token_length, rollout.response_length"),
    "eval_response_length": no("evaluations use rollout.response_length"),
    "world_size": no("the number of learner ranks is learner.num_learners"),
    "allow_world_padding": no("learners take token-balanced shares of each mini-batch; nothing is padded to the world size"),
    # optimizer
    "warm_up_steps": key("optim.warmup_steps"),
    "set_weight_decay_on_bias_and_norm": no("optim.weight_decay applies to every trained parameter"),
    "fused_optimizer": no("the optimizer is torch's AdamW as it comes"),
    "compile_model": no("the learner's model is not torch.compile'd"),
    "activation_memory_budget": no("model.gradient_checkpointing recomputes every layer or none"),
    "cp_degree": no("no context parallelism: a sequence is computed on one learner"),
    # algorithm
    "clip_lower": key("loss.clip_lower", ' (loss "dapo", the default; loss "grpo" and "dr_grpo" have one clip)'),
    "clip_higher": key("loss.clip_higher", ' (loss "dapo", the default, and "cispo")'),
    "loss_fn": key("loss.name", convert=mapped({"dapo": "dapo", "cispo": "cispo"}, "loss_fn")),
    "kl_estimator": key("kl.name", ": kl1 -> k1, kl2 -> k2, kl3 -> k3 (0, 1, 2 in newer versions)",
                        convert=mapped(_KL, "kl_estimator")),
    "masked_mean_axis": key("algorithm.loss_aggregation"),
    "masked_mean_denominator": key("algorithm.loss_denominator"),
    "load_ref_policy": key("kl.reference", ' = "none" when false (no reference model; kl.beta must be 0)',
                           convert=lambda v: "frozen" if truthy(v) else "none"),
    "record_entropy": key("algorithm.log_entropy"),
    "use_vllm_logprobs": key("algorithm.use_engine_logprobs_as_old"),
    "truncated_importance_sampling_ratio_cap": key("algorithm.mismatch_upper",
                                                   also={"algorithm.mismatch_correction": "token-truncate"}),
    "active_sampling": key("sampler.name", ' = "active" (it refills the batch with groups that have a reward spread)',
                           convert=lambda v: "active" if truthy(v) else "uniform"),
    "no_resampling_pass_rate": key("sampler.no_resampling_pass_rate", also={"sampler.name": "active"}),
    # rewards
    "apply_verifiable_reward": says("a [verifiers.<name>] table per verifier the rows name (math, ifeval, code, judge)"),
    "remap_verifier": says("data.train.verifier", ": the verifier of a whole source"),
    "reward_aggregator": key("environment.reward_combination"),
    "apply_r1_style_format_reward": key(
        "verifiers.format", ": a [verifiers.format] table, added to every row (Open Instruct's "
        "additive_format_reward = true; its default, adding it only where the answer is right, has no equivalent)",
        convert=enables),
    "r1_style_format_reward": key("verifiers.format.weight"),
    "additive_format_reward": no("the format reward is always added to every row ([verifiers.format])"),
    "non_stop_penalty": key("verifiers.non_stop_penalty", ': a [verifiers.non_stop_penalty] table with mode = "gate" '
                            "(the whole reward of a completion that did not stop becomes gate_fail_reward)",
                            convert=enables),
    "non_stop_penalty_value": key("verifiers.non_stop_penalty.gate_fail_reward",
                                  also={"verifiers.non_stop_penalty.mode": "gate"}),
    "only_reward_good_outputs": no("rewards do not depend on tool-call errors"),
    "llm_judge_model": key("verifiers.judge.model"),
    "llm_judge_max_tokens": key("verifiers.judge.max_tokens"),
    "llm_judge_temperature": key("verifiers.judge.temperature"),
    "llm_judge_timeout": key("verifiers.judge.timeout_s"),
    "llm_judge_max_context_length": no("the judge server bounds its context; the verifier sends the prompt as it is"),
    "code_api_url": no("the code verifier runs programs locally, in a bubblewrap sandbox"),
    "code_max_execution_time": key("verifiers.code.timeout_s"),
    "code_pass_rate_reward_threshold": no("the code verifier's score is the pass rate of the row's tests"),
    "code_apply_perf_penalty": no("the code verifier does not time programs against a reference"),
    "max_length_verifier_max_length": no("no max_length verifier (verifiers.length rewards a target length "
                                         "and penalises over-long completions)"),
    "apply_evolving_rubric_reward": no("no evolving-rubric rewards"),
    "max_possible_score": no("computed from the enabled verifiers; logged at start as max_possible_score"),
    # data
    "dataset_mixer_list": says("[[data.train]] sources, each with a path or hf_dataset and a weight or rows"),
    "dataset_mixer_eval_list": says("[[data.eval]] sources, each with a path or hf_dataset and a weight or rows"),
    "dataset_mixer_list_splits": key("data.train.split"),
    "dataset_mixer_eval_list_splits": key("data.eval.split"),
    "dataset_transform_fn": no("grpo-run tokenises the prompts and drops those over data.max_prompt_token_length "
                               "itself; data.train.transform maps ground truths (gsm8k, boxed)"),
    "dataset_cache_mode": no("rows are read at start; there is no dataset cache"),
    "dataset_local_cache_dir": no("rows are read at start; there is no dataset cache"),
    "dataset_config_hash": no("rows are read at start; there is no dataset cache"),
    "dataset_config_eval_hash": no("rows are read at start; there is no dataset cache"),
    "dataset_skip_cache": no("rows are read at start; there is no dataset cache"),
    "cache_dataset_only": no("rows are read at start; there is no dataset cache"),
    "shuffle_eval_dataset": no("every eval row is evaluated, in order"),
    "system_prompt_override_file": key("data.train.system_prompt", ", the text itself"),
    "ground_truths_key": key("data.train.ground_truth_key"),
    "sft_messages_key": key("data.train.messages_key"),
    "data_loader_seed": key("data.seed"),
    # tokenizer
    "chat_template_name": no("the tokenizer's own chat template is used (data.apply_chat_template)"),
    "add_bos": no("the tokenizer's chat template decides the special tokens"),
    "get_tokenizer_fn": no("the tokenizer is model.name_or_path's"),
    "tokenizer_name_or_path": no("the tokenizer is model.name_or_path's"),
    "tokenizer_revision": no("the tokenizer is model.name_or_path's, at model.revision"),
    "use_slow_tokenizer": no("the tokenizer is model.name_or_path's"),
    # generation
    "inflight_updates": key("engine.inflight_updates", also={"engine.name": "vllm"}),
    "vllm_num_engines": key("engine.num_engines", also={"engine.name": "vllm"}),
    "vllm_tensor_parallel_size": key("engine.tensor_parallel_size", also={"engine.name": "vllm"}),
    "vllm_enforce_eager": key("engine.enforce_eager", also={"engine.name": "vllm"}),
    "vllm_gpu_memory_utilization": key("engine.gpu_memory_utilization", also={"engine.name": "vllm"}),
    "vllm_enable_prefix_caching": key("engine.enable_prefix_caching", also={"engine.name": "vllm"}),
    "vllm_sync_backend": key("engine.weight_transfer", ': "nccl" across machines, "shm" (shared memory) on one',
                             also={"engine.name": "vllm"}, convert=mapped({"nccl": "nccl", "gloo": "shm"}, "vllm_sync_backend")),
    "vllm_top_p": key("rollout.top_p"),
    "vllm_attention_backend": no("vLLM picks its attention backend"),
    "use_fp8_kv_cache": no("the KV cache is in the engine's dtype"),
    "mask_tool_use": key("environment.train_on_env_tokens", ", the other way round", convert=inverted),
    "tools": says("a [tools.<name>] table per tool, offered by [environment] name = \"tools\""),
    "max_tool_calls": says("environment.max_turns", ", assistant turns rather than calls"),
    # placement
    "single_gpu_mode": no("one learner beside an engine on one device is the default layout"),
    "num_learners_per_node": says("learner.num_learners",
                                 ": the total (the list's sum); one per node: a custom Ray resource per node, "
                                 "distributed.learner_resources (docs/scale-out.md)"),
    "num_nodes": no("Ray places the actors on the cluster's nodes as their resources ask (docs/scale-out.md)"),
    "deepspeed_stage": key("learner.zero_stage", also={"learner.strategy": "deepspeed"}, convert=_stage),
    "deepspeed_zpg": no("no ZeRO++ hierarchical partitioning"),
    "deepspeed_offload_param": key("learner.offload_params"),
    "deepspeed_offload_optimizer": key("learner.offload_optimizer"),
    "deepspeed_checkpoint_load_universal": no("checkpoints are Hugging Face models plus trainer_state.pt"),
    "gather_whole_model": no("weights reach the engines in buckets of engine.weight_bucket_mb"),
    "fsdp_shard_degree": no('learner.strategy = "fsdp2" shards over every learner (no replica groups)'),
    "fsdp_num_replicas": no('learner.strategy = "fsdp2" shards over every learner (no replica groups)'),
    "sequence_parallel_size": no("no sequence parallelism: a sequence is computed on one learner"),
    "backend_timeout": key("learner.collective_timeout_s", ", in seconds (Open Instruct: minutes)",
                           convert=lambda v: float(v) * 60.0),
    "enable_queue_dashboard": key("logging.dashboard_port", ", a port (0 = off)",
                                  convert=lambda v: 8765 if truthy(v) else 0),
    "queue_dashboard_port": key("logging.dashboard_port"),
    # logging, checkpoints
    "exp_name": key("run.name"),
    "verbose": key("logging.level", ' = "debug"', convert=lambda v: "debug" if truthy(v) else "info"),
    "with_tracking": says("a [trackers.<name>] table (wandb, tensorboard, mlflow)"),
    "wandb_project_name": key("trackers.wandb.project"),
    "wandb_project": key("trackers.wandb.project"),
    "wandb_entity": key("trackers.wandb.entity"),
    "wandb_group_name": key("trackers.wandb.tags", ", a list of tags", convert=lambda v: [v]),
    "hf_entity": says("checkpoint.push_to_hub.repo_id", ', as "<entity>/<name>"'),
    "hf_repo_id": key("checkpoint.push_to_hub.repo_id"),
    "hf_repo_revision": no("each pushed checkpoint is a commit on the repository's main branch"),
    "hf_repo_url": no("the repository follows from checkpoint.push_to_hub.repo_id"),
    "save_traces": key("logging.log_rollouts_every", ", every how many steps (0 = never)",
                       convert=lambda v: 1 if truthy(v) else 0),
    "rollouts_save_path": no("rollout traces go to rollouts/ in the run directory"),
    "keep_last_n_checkpoints": key("checkpoint.keep_last_n"),
    "checkpoint_state_freq": key("checkpoint.save_freq", ": every checkpoint holds what --resume needs"),
    "checkpoint_state_dir": key("checkpoint.dir"),
    "checkpointing_steps": key("checkpoint.save_freq"),
    "gs_checkpoint_state_dir": no("no cloud-storage upload (checkpoint.push_to_hub uploads to the Hugging Face Hub)"),
    "gs_bucket_path": no("no cloud-storage upload (checkpoint.push_to_hub uploads to the Hugging Face Hub)"),
    "eval_on_step_0": says("train.local_eval_every", ": every run with evaluations evaluates before its first step"),
    "eval_pass_at_k": key("eval.num_samples"),
    "eval_top_p": no("evaluations are greedy, and pass@k samples at eval.temperature"),
    "model_dtype": key("model.dtype"),
    "use_flash_attn": says("model.attn_implementation", ': "sdpa" (PyTorch\'s fused kernels) or "eager"'),
    "try_launch_beaker_eval_jobs_on_weka": no(_BEAKER),
    "try_auto_save_to_beaker": no(_BEAKER),
    "oe_eval_tasks": no(_BEAKER),
    "oe_eval_max_length": no(_BEAKER),
    "oe_eval_beaker_image": no(_BEAKER),
    "oe_eval_gpu_multiplier": no(_BEAKER),
    "eval_priority": no(_BEAKER),
    "eval_workspace": no(_BEAKER),
    "send_slack_alerts": no("no alerts; the exit code and log.jsonl say how a run ended"),
    "use_bnb_nested_quant": no("no quantised training"),
}
