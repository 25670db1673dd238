"""TRL's ``GRPOConfig``: completions per device and accumulation become prompts per step and
mini-batches; its clip defaults and the ``TrainingArguments`` defaults it overrides."""

from __future__ import annotations

from typing import Any

from grpo_run.cli.porting.common import finish_common, take_warmup_ratio
from grpo_run.cli.porting.translate import Handler, Setting, Translation

_BATCH = ("per_device_train_batch_size", "gradient_accumulation_steps", "generation_batch_size",
          "steps_per_generation", "num_processes", "max_steps", "epsilon", "epsilon_high", "loss_type")
DEFAULTS: tuple[tuple[str, str, Any], ...] = (
    ("optim.lr", "learning_rate", 1e-6),
    ("rollout.response_length", "max_completion_length", 256),
    ("optim.lr_scheduler", "lr_scheduler_type", "linear"),
)


def _later(t: Translation, path: str, value: Any) -> bool:
    t.later[path.rpartition(".")[2]] = Setting(value, t.written(path, value))
    return True


def _dataset(t: Translation, path: str, value: Any) -> bool:
    """``trl grpo`` script arguments: a hub dataset and its splits."""
    t.later[path] = Setting(value, t.written(path, value))
    return True


HANDLERS: dict[str, Handler] = {**{name: _later for name in _BATCH}, "warmup_ratio": take_warmup_ratio,
                                **{name: _dataset for name in ("dataset_name", "dataset_config", "dataset_train_split",
                                                               "dataset_test_split")}}


def _value(t: Translation, name: str, default: Any) -> Any:
    return t.later[name].value if name in t.later else default


def finish(t: Translation) -> None:
    values = t.values
    for path, name, default in DEFAULTS:
        if name not in values and not t.has(path):
            t.set(path, default, f"TRL's default ({name})")
    _batches(t)
    _loss(t)
    _sources(t)
    finish_common(t)


def _sources(t: Translation) -> None:
    later = t.later
    if "dataset_name" not in later:
        return
    fields: dict[str, Any] = {"hf_dataset": later["dataset_name"].value}
    if "dataset_config" in later:
        fields["subset"] = later["dataset_config"].value
    t.add_source("train", {**fields, "split": later["dataset_train_split"].value if "dataset_train_split" in later
                           else "train"}, later["dataset_name"].origin)
    if "dataset_test_split" in later:
        t.add_source("eval", {**fields, "split": later["dataset_test_split"].value}, later["dataset_test_split"].origin)
    t.by_hand.append((later["dataset_name"].origin, "name the column your reward functions compare against: "
                                                    "data.train.ground_truth_key (and the verifier that checks it)"))


def _batches(t: Translation) -> None:
    group = t.get("rollout.num_samples_per_prompt_rollout", 8)
    per = int(_value(t, "per_device_train_batch_size", 8))
    accumulate = int(_value(t, "gradient_accumulation_steps", 1))
    processes = int(_value(t, "num_processes", 1))
    per_step = per * processes * accumulate  # completions per optimizer step
    generation = _value(t, "generation_batch_size", None)
    generation = int(generation) if generation is not None else per * processes * int(
        _value(t, "steps_per_generation", accumulate))
    origin = (f"generation batch {generation} completions / {group} generations"
              f"{'' if 'num_processes' in t.later else ' (one process assumed)'}")
    if generation % group or generation % per_step:
        t.by_hand.append((origin, "set rollout.num_unique_prompts_rollout and algorithm.num_mini_batches by hand"))
        return
    t.set("rollout.num_unique_prompts_rollout", generation // group, origin)
    minis = generation // per_step
    if minis > 1:
        t.set("algorithm.num_mini_batches", minis, f"generation batch {generation} / {per_step} completions a step")
    if "max_steps" in t.later:
        steps = int(t.later["max_steps"].value)
        epochs = t.get("algorithm.num_epochs", 1)
        t.set("train.total_steps", max(1, steps // (minis * epochs)),
              f"{t.later['max_steps'].origin} optimizer steps / ({minis} mini-batches x {epochs} iterations)")


def _loss(t: Translation) -> None:
    loss = str(_value(t, "loss_type", "dapo"))
    names = {"bnpo": "dapo", "grpo": "grpo", "dr_grpo": "dr_grpo", "dapo": "dapo", "cispo": "cispo"}
    if loss not in names:
        t.left_out.append((t.later["loss_type"].origin, f"loss_type {loss!r} has no equivalent"))
        return
    origin = t.later["loss_type"].origin if "loss_type" in t.later else "TRL's default (loss_type dapo)"
    t.set("loss.name", names[loss], origin)
    epsilon = float(_value(t, "epsilon", 0.2))
    eps_origin = t.later["epsilon"].origin if "epsilon" in t.later else "TRL's default (epsilon 0.2)"
    if names[loss] in ("grpo", "dr_grpo"):
        t.set("loss.clip", epsilon, eps_origin)
    elif names[loss] == "dapo":
        t.set("loss.clip_lower", epsilon, eps_origin)
        high = _value(t, "epsilon_high", None)
        t.set("loss.clip_higher", float(high) if high is not None else epsilon,
              t.later["epsilon_high"].origin if high is not None else "parity: TRL's epsilon_high defaults to epsilon")
        if high is None:
            t.parity.append(f"loss.clip_higher = {epsilon:g}: TRL clips symmetrically unless epsilon_high is set; "
                            "grpo-run's dapo loss clips higher at 0.28")
    elif "epsilon_high" in t.later:
        t.set("loss.clip_higher", float(t.later["epsilon_high"].value), t.later["epsilon_high"].origin)
