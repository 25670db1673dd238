"""Names that several peer frameworks use with one meaning: Hugging Face ``TrainingArguments``
(TRL's ``GRPOConfig`` extends it, ROLL's ``training_args`` is one), sampling arguments, LoRA.

Keys of the tables are peer key paths: ``learning_rate`` anywhere, ``generating_args.top_k``
under a table of that name (the longest matching tail of a path wins).
"""

from __future__ import annotations

from typing import Any

from grpo_run.core.config.peer_tables.entry import OMIT, Peer, enables, key, mapped, no, says, truthy

_SCHEDULERS = {"constant": "constant", "constant_with_warmup": "constant", "linear": "linear", "cosine": "cosine"}
_DTYPES = {"bf16": "bfloat16", "bfloat16": "bfloat16", "fp16": "float16", "float16": "float16",
           "fp32": "float32", "float32": "float32"}

TRAINING_ARGUMENTS: dict[str, Peer] = {
    "learning_rate": key("optim.lr"),
    "lr_scheduler_type": key("optim.lr_scheduler", convert=mapped(_SCHEDULERS, "lr_scheduler_type")),
    "warmup_ratio": says("optim.warmup_steps", ", a number of steps: warmup_ratio x train.total_steps"),
    "adam_beta1": key("optim.betas", ", the first of the two"),
    "adam_beta2": key("optim.betas", ", the second of the two"),
    "adam_epsilon": key("optim.eps"),
    "per_device_train_batch_size": no(
        "a per-device micro-batch, of sequences (Open Instruct, ROLL) or of completions (TRL); grpo-run "
        "splits a mini-batch into micro-batches by tokens (learner.max_tokens_per_forward), and a step's "
        "batch is rollout.num_unique_prompts_rollout prompts x rollout.num_samples_per_prompt_rollout samples"),
    "per_device_eval_batch_size": no("an evaluation generates every eval prompt in one engine call"),
    "gradient_accumulation_steps": says(
        "algorithm.num_mini_batches",
        ", the other way round: a rollout batch is one step, split into that many optimizer steps"),
    "num_train_epochs": says("train.total_steps", ", a number of steps: epochs x rows / rollout.num_unique_prompts_rollout"),
    "max_steps": key("train.total_steps"),
    "save_steps": key("checkpoint.save_freq"),
    "save_strategy": key("checkpoint.save_freq", ', a number of steps ("no": 0, only the final checkpoint)',
                         convert=lambda v: 0 if v == "no" else OMIT),
    "save_total_limit": key("checkpoint.keep_last_n"),
    "eval_steps": key("train.local_eval_every"),
    "eval_strategy": key("train.local_eval_every", ', a number of steps ("no": 0)',
                         convert=lambda v: 0 if v == "no" else OMIT),
    "logging_steps": no("every step's metrics go to metrics.jsonl"),
    "logging_dir": no("logs go to the run directory (log.jsonl, metrics.jsonl)"),
    "report_to": says("a [trackers.<name>] table per tracker (wandb, tensorboard, mlflow)"),
    "run_name": key("run.name"),
    "bf16": key("model.autocast", ' = "bfloat16" for fp32 master weights, or model.dtype = "bfloat16" for pure bf16',
                convert=lambda v: "bfloat16" if truthy(v) else OMIT),
    "fp16": key("model.dtype", ' = "float16"', convert=lambda v: "float16" if truthy(v) else OMIT),
    "tf32": no("torch's matmul precision is left as it is"),
    "torch_dtype": key("model.dtype", convert=mapped(_DTYPES, "dtype")),
    "dataloader_num_workers": no("rows are read once, at start; there are no loader workers"),
    "preprocessing_num_workers": no("rows are read once, at start; there are no loader workers"),
    "resume_from_checkpoint": says("the --resume option: grpo-run config.toml --resume runs/<name>"),
    "push_to_hub": key("checkpoint.push_to_hub", ": a [checkpoint.push_to_hub] table with repo_id", convert=enables),
    "hub_model_id": key("checkpoint.push_to_hub.repo_id"),
    "hub_private_repo": key("checkpoint.push_to_hub.private"),
    "model_name_or_path": key("model.name_or_path"),
    "model_revision": key("model.revision"),
    "data_seed": key("data.seed"),
    "optim": no("the optimizer is AdamW ([optim] holds its settings)"),
}
"""Hugging Face ``TrainingArguments`` names."""

SAMPLING: dict[str, Peer] = {
    "max_new_tokens": key("rollout.response_length"),
    "num_return_sequences": key("rollout.num_samples_per_prompt_rollout"),
    "top_k": no("no top-k sampling; rollout.top_p (nucleus sampling) is there"),
    "min_p": no("no min-p sampling; rollout.top_p (nucleus sampling) is there"),
    "repetition_penalty": no("sampling has no repetition penalty"),
    "length_penalty": no("sampling has no length penalty (verifiers.length rewards length instead)"),
    "num_beams": no("rollouts sample; there is no beam search"),
    "do_sample": no("rollouts always sample; evaluations are greedy (plus eval.num_samples sampled ones for pass@k)"),
    "max_length": no("prompt and completion are bounded apart: data.max_prompt_token_length, rollout.response_length"),
    "logprobs": no("engines always return the sampled tokens' log-probs"),
    "include_stop_str_in_output": no("a stop string stays in the completion"),
}
"""Generation arguments (``transformers.GenerationConfig`` and vLLM's names)."""

LORA: dict[str, Peer] = {
    "use_peft": key("model.lora", ": a [model.lora] table", convert=enables),
    "lora_r": key("model.lora.r"),
    "lora_rank": key("model.lora.r"),
    "lora_alpha": key("model.lora.alpha"),
    "lora_dropout": key("model.lora.dropout"),
    "lora_target_modules": key("model.lora.target_modules"),
    "lora_target": key("model.lora.target_modules", ', a list ("all" is "all-linear")'),
    "lora_modules_to_save": key("model.lora.modules_to_save"),
    "lora_task_type": no("adapters are always for causal language modelling"),
}
"""LoRA through ``peft``."""


def merged(*tables: dict[str, Peer]) -> dict[str, Peer]:
    """The tables in one; a key two tables define differently is an error (one place per fact)."""
    out: dict[str, Peer] = {}
    for t in tables:
        for name, peer in t.items():
            if name in out and out[name] != peer:
                raise ValueError(f"peer key {name!r} is defined twice, differently")
            out[name] = peer
    return out


SHARED: dict[str, Peer] = merged(TRAINING_ARGUMENTS, SAMPLING, LORA)


def dtype_name(value: Any) -> str:
    """``bf16`` / ``torch.bfloat16`` / ``bfloat16`` -> grpo-run's dtype name."""
    text = str(value).removeprefix("torch.")
    return mapped(_DTYPES, "dtype")(text)
