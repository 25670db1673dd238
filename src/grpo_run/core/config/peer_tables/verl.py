"""verl's Hydra config (``ppo_trainer.yaml``: ``data``, ``actor_rollout_ref``, ``algorithm``,
``trainer`` ...) and the PPO names ROLL shares with it.

verl nests its keys (``actor_rollout_ref.rollout.n``); entries are tails of those paths, so
``rollout.n`` matches wherever it sits, and a flat ``rollout_n`` too.
"""

from __future__ import annotations

from grpo_run.core.config.peer_tables.entry import OMIT, Peer, key, mapped, no, says, table, truthy

_NO_CRITIC = "GRPO has no critic: the baseline is the group's mean reward"
_KL_PENALTY = {"kl": "k1", "k1": "k1", "mse": "k2", "k2": "k2", "low_var_kl": "low_var", "k3": "k3"}

PPO_NAMES: dict[str, Peer] = {
    "ppo_epochs": key("algorithm.num_epochs"),
    "adv_estimator": key("algorithm.advantage_normalization_type",
                         ': adv_estimator "grpo" is grpo-run\'s group advantage ("standard"); '
                         '"reinforce", "gae" and the others have no equivalent',
                         convert=mapped({"grpo": "standard"}, "adv_estimator")),
    "loss_agg_mode": key("algorithm.loss_aggregation",
                         ': "seq-mean-token-sum-norm" is "token-mean" with a constant algorithm.loss_denominator'),
    "use_kl_loss": key("kl.placement", ' = "loss" (with kl.beta > 0)', convert=lambda v: "loss" if truthy(v) else OMIT),
    "kl_loss_coef": key("kl.beta", also={"kl.placement": "loss"}),
    "kl_loss_type": key("kl.name", convert=mapped(_KL_PENALTY, "kl_loss_type")),
    "kl_penalty": key("kl.name", ": kl -> k1, mse -> k2, low_var_kl -> low_var; abs and full have no equivalent",
                      convert=mapped(_KL_PENALTY, "kl_penalty")),
    "target_kl": no("kl.beta is a fixed coefficient; there is no adaptive KL controller"),
    "kl_horizon": no("kl.beta is a fixed coefficient; there is no adaptive KL controller"),
    "horizon": no("kl.beta is a fixed coefficient; there is no adaptive KL controller"),
    "entropy_coeff": no("no entropy bonus (algorithm.log_entropy logs the entropy)"),
    "entropy_loss_coef": no("no entropy bonus (algorithm.log_entropy logs the entropy)"),
    "critic_warmup": no(_NO_CRITIC),
    "critic": no(_NO_CRITIC),
    "gamma": no("GAE's discount: " + _NO_CRITIC + " (environment.discount discounts turns of an episode)"),
    "lam": no("GAE's lambda: " + _NO_CRITIC),
    "lambd": no("GAE's lambda: " + _NO_CRITIC),
    "clip_ratio": key("loss.clip_lower", ' and loss.clip_higher (loss "dapo"); loss.clip in "grpo" and "dr_grpo"'),
    "clip_ratio_low": key("loss.clip_lower"),
    "clip_ratio_high": key("loss.clip_higher"),
    "clip_ratio_c": key("loss.delta", " (the dual clip)"),
    "clip_range": key("loss.clip_lower", ' and loss.clip_higher (loss "dapo"); loss.clip in "grpo" and "dr_grpo"'),
    "cliprange": key("loss.clip_lower", ' and loss.clip_higher (loss "dapo"); loss.clip in "grpo" and "dr_grpo"'),
}
"""PPO names verl and ROLL both use, with one meaning."""

VERL: dict[str, Peer] = {
    "actor_rollout_ref": table("verl's actor, rollout and reference settings"),
    "actor": table("verl's actor settings"),
    "actor.optim": table("verl's optimizer settings"),
    "rollout.val_kwargs": table("verl's sampling settings for validation"),
    "trainer": table("verl's trainer settings"),
    "kl_ctrl": table("verl's KL controller"),
    "fsdp_config": table("verl's FSDP settings"),
    # data
    "train_files": key("data.train.path", ": one [[data.train]] source per file"),
    "val_files": key("data.eval.path", ": one [[data.eval]] source per file"),
    "reward_fn_key": key("data.train.verifier_key"),
    "max_prompt_length": key("data.max_prompt_token_length"),
    "max_response_length": key("rollout.response_length"),
    "train_batch_size": key("rollout.num_unique_prompts_rollout"),
    "val_batch_size": no("an evaluation generates every eval prompt in one engine call"),
    "return_raw_chat": no("rows keep their messages; the engine gets token ids"),
    "filter_overlong_prompts": says("data.max_prompt_token_length", ": longer prompts are always dropped"),
    "truncation": no("over-long prompts are dropped (with a warning), never truncated"),
    "tokenizer": no("the tokenizer is model.name_or_path's"),
    # actor and model
    "model.path": key("model.name_or_path"),
    "use_remove_padding": no("sequences are always packed without padding"),
    "enable_gradient_checkpointing": key("model.gradient_checkpointing"),
    "external_lib": no("plugins are found through entry points, or named as module:Class"),
    "override_config": no("the model's config is used as it is"),
    "hybrid_engine": no('the local backend runs engine and learner in one process; engine.sleep_between_rollouts '
                        'frees vLLM\'s memory between rollouts'),
    "actor.strategy": key("learner.strategy", convert=mapped({"fsdp": "fsdp2", "fsdp2": "fsdp2"}, "strategy")),
    "ppo_mini_batch_size": says("algorithm.num_mini_batches", ", a count of mini-batches, not their size"),
    "ppo_micro_batch_size": says("learner.max_tokens_per_forward", ", a token budget rather than a count"),
    "ppo_micro_batch_size_per_gpu": says("learner.max_tokens_per_forward", ", a token budget rather than a count"),
    "use_dynamic_bsz": says("learner.max_tokens_per_forward", ": micro-batches are always sized by tokens"),
    "ppo_max_token_len_per_gpu": key("learner.max_tokens_per_forward"),
    "log_prob_micro_batch_size_per_gpu": says("learner.max_tokens_per_logprob_forward", ", a token budget"),
    "log_prob_max_token_len_per_gpu": key("learner.max_tokens_per_logprob_forward"),
    "grad_clip": key("optim.max_grad_norm"),
    "ulysses_sequence_parallel_size": no("no sequence parallelism: a sequence is computed on one learner"),
    "param_offload": key("learner.offload_params"),
    "optimizer_offload": key("learner.offload_optimizer"),
    "lr_warmup_steps": key("optim.warmup_steps"),
    "lr_warmup_steps_ratio": says("optim.warmup_steps", ", a number of steps: ratio x train.total_steps"),
    "warmup_style": key("optim.lr_scheduler", convert=mapped({"constant": "constant", "cosine": "cosine"}, "warmup_style")),
    "min_lr_ratio": no("linear and cosine schedules decay to 0"),
    # rollout
    "rollout.n": key("rollout.num_samples_per_prompt_rollout"),
    "rollout_n": key("rollout.num_samples_per_prompt_rollout"),
    "rollout.name": key("engine.name", convert=mapped({"vllm": "vllm", "hf": "hf"}, "rollout.name")),
    "rollout.mode": no("the vllm engine runs in a worker process grpo-run starts"),
    "rollout.prompt_length": key("data.max_prompt_token_length"),
    "rollout.dtype": key("engine.dtype", also={"engine.name": "vllm"}),
    "rollout.gpu_memory_utilization": key("engine.gpu_memory_utilization", also={"engine.name": "vllm"}),
    "rollout.tensor_model_parallel_size": key("engine.tensor_parallel_size", also={"engine.name": "vllm"}),
    "rollout.enforce_eager": key("engine.enforce_eager", also={"engine.name": "vllm"}),
    "rollout.free_cache_engine": key("engine.sleep_between_rollouts", also={"engine.name": "vllm"}),
    "rollout.max_num_batched_tokens": key("engine.max_num_batched_tokens", also={"engine.name": "vllm"}),
    "rollout.max_num_seqs": key("engine.max_num_seqs", also={"engine.name": "vllm"}),
    "rollout.max_model_len": key("engine.max_model_len", also={"engine.name": "vllm"}),
    "rollout.ignore_eos": no("generation stops at the EOS token"),
    "val_kwargs.temperature": key("eval.temperature"),
    "val_kwargs.n": key("eval.num_samples"),
    "val_kwargs.do_sample": no("evaluations are greedy, plus eval.num_samples sampled completions"),
    # algorithm
    "norm_adv_by_std_in_grpo": key("algorithm.advantage_normalization_type", ': true is "standard", false "centered"',
                                   convert=lambda v: "standard" if truthy(v) else "centered"),
    "use_kl_in_reward": key("kl.placement", ' = "reward"', convert=lambda v: "reward" if truthy(v) else OMIT),
    "kl_coef": key("kl.beta", also={"kl.placement": "reward"}),
    "kl_ctrl.type": no("kl.beta is a fixed coefficient; there is no adaptive KL controller"),
    # reward
    "reward_model.enable": says("a [verifiers.reward_model] table"),
    "reward_model.model.path": key("verifiers.reward_model.model"),
    "reward_manager": no("the scorer combines the verifiers' scores (scoring.verification_reward, weights)"),
    "custom_reward_function": says("a plain reward function (grpo_run.train(config, reward_funcs=[f]), docs/python-api.md) "
                                   "or a verifier plugin (grpo-run new-plugin verifier NAME)"),
    # trainer
    "total_epochs": says("train.total_steps", ", a number of steps: epochs x rows / rollout.num_unique_prompts_rollout"),
    "total_training_steps": key("train.total_steps"),
    "project_name": key("trackers.wandb.project"),
    "experiment_name": key("run.name"),
    "trainer.logger": says("a [trackers.<name>] table per logger (wandb, tensorboard, mlflow)"),
    "log_val_generations": says("logging.log_rollouts_every", ": every evaluation's completions go to rollouts/"),
    "nnodes": no("Ray places the actors on the cluster's nodes as their resources ask (docs/scale-out.md)"),
    "n_gpus_per_node": no("Ray reads each node's GPUs; actors ask for theirs in [distributed] resources"),
    "test_freq": key("train.local_eval_every"),
    "resume_mode": says("the --resume option: grpo-run config.toml --resume runs/<name>"),
    "default_local_dir": key("checkpoint.dir"),
    "default_hdfs_dir": no("no HDFS upload (checkpoint.push_to_hub uploads to the Hugging Face Hub)"),
    "val_before_train": says("train.local_eval_every", ": every run with evaluations evaluates before its first step"),
    "max_actor_ckpt_to_keep": key("checkpoint.keep_last_n"),
    "balance_batch": no("learners always take token-balanced shares of each mini-batch"),
}
