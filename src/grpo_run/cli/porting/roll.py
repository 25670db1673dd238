"""ROLL's ``rlvr_config``: data files, rewards, the global-batch arithmetic behind a step's
optimizer steps, and ROLL's defaults where they differ from grpo-run's."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from grpo_run.cli.porting.common import finish_common, take_warmup_ratio
from grpo_run.cli.porting.translate import Handler, Setting, Translation
from grpo_run.core.config.peer_tables.entry import truthy

_REWARDS = {"math_rule": "math", "math": "math", "ifeval": "ifeval", "code_sandbox": "code", "llm_judge": "judge"}
_PARALLEL = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size")


def _files(t: Translation, path: str, value: Any) -> bool:
    which = "eval" if path.startswith("validation.") or "eval_file_name" in path else "train"
    for name in value if isinstance(value, list) else [value]:
        t.add_source(which, {"path": str(name)}, f"{path}: {name}")
    return True


def _keep(t: Translation, path: str, value: Any) -> bool:
    """Remembered for the batch arithmetic, and listed as usual."""
    if path.startswith("actor_train."):
        t.later[path.rpartition(".")[2]] = Setting(value, t.written(path, value))
        return path.endswith(("per_device_train_batch_size", "gradient_accumulation_steps"))
    return False


def _weights(t: Translation, path: str, value: Any) -> bool:
    t.by_hand.append((t.written(path, value), "a [sampler] name = \"mixture\" with weights per source (the rows' "
                                              "dataset value: each file's stem), not per domain tag"))
    return True


def _rewards(t: Translation, path: str, value: Any) -> bool:
    workers = value if isinstance(value, Mapping) else {}
    for name in workers:
        verifier = _REWARDS.get(str(name))
        if verifier is None:
            t.by_hand.append((f"rewards.{name}", "no built-in verifier of that name: write a verifier plugin "
                                                 "(grpo-run new-plugin verifier NAME)"))
        else:
            t.set(f"verifiers.{verifier}", {}, f"rewards.{name}", keep=True)
    if len(workers) > 1:
        t.by_hand.append(("rewards: tag_included", "ROLL routes rows to rewards by tag: name each row's verifier "
                                                   "(a verifier column, or data.train.verifier per source)"))
    return True


def _kl(t: Translation, path: str, value: Any) -> bool:
    """A KL coefficient counts only with its switch (add_token_level_kl, use_kl_loss): kept for :func:`finish`."""
    t.later[path.rpartition(".")[2]] = Setting(value, t.written(path, value))
    return True


HANDLERS: dict[str, Handler] = {
    "init_kl_coef": _kl,
    "kl_loss_coef": _kl,
    "dual_clip_loss": _kl,
    "data_args.file_name": _files,
    "data_args.eval_file_name": _files,
    "data_args.domain_interleave_probs": _weights,
    "per_device_train_batch_size": _keep,
    "gradient_accumulation_steps": _keep,
    "device_mapping": _keep,
    **{name: _keep for name in _PARALLEL},
    "rewards": _rewards,
    "warmup_ratio": take_warmup_ratio,
}


def _devices(mapping: Any) -> int | None:
    if isinstance(mapping, list):
        return len(mapping)
    m = re.fullmatch(r"\s*list\(\s*range\(\s*(\d+)\s*,\s*(\d+)\s*\)\s*\)\s*", str(mapping))
    return int(m[2]) - int(m[1]) if m else None


def finish(t: Translation) -> None:
    values = t.values
    for path, name, default, why in (
        ("rollout.num_unique_prompts_rollout", "rollout_batch_size", 128, "ROLL's default"),
        ("data.max_prompt_token_length", "prompt_length", 1024, "ROLL's default"),
        ("algorithm.loss_aggregation", "loss_agg_mode", "seq-mean-token-mean", "parity: ROLL's default loss_agg_mode"),
    ):
        if name not in values and not t.has(path):
            t.set(path, default, why)
            if why.startswith("parity"):
                t.parity.append(f'{path} = "{default}": ROLL\'s default loss_agg_mode; grpo-run\'s is "token-mean"')
    if not any(name in values for name in ("pg_clip", "pg_clip_high")) and t.get("loss.name", "dapo") == "dapo":
        t.set("loss.clip_higher", 0.2, "parity: ROLL's default pg_clip 0.2 clips both ways")
        t.parity.append("loss.clip_higher = 0.2: ROLL clips the ratio at 1 +- pg_clip (0.2) by default; grpo-run's "
                        "dapo loss clips higher at 0.28")
    if "adv_estimator" not in values:
        t.parity.append("advantages: ROLL's default adv_estimator is \"gae\" (a critic's); grpo-run computes GRPO's "
                        "group advantage, as adv_estimator = \"grpo\" does")
    _mini_batches(t)
    _kl_and_dual_clip(t, values)
    finish_common(t)


def _kl_and_dual_clip(t: Translation, values: dict[str, Any]) -> None:
    later = t.later
    if truthy(values.get("add_token_level_kl", False)):
        coef = later.get("init_kl_coef")
        t.set("kl.beta", float(coef.value) if coef else 0.2, coef.origin if coef else "ROLL's default init_kl_coef")
    elif truthy(values.get("use_kl_loss", False)):
        coef = later.get("kl_loss_coef")
        t.set("kl.beta", float(coef.value) if coef else 0.0, coef.origin if coef else "ROLL's default kl_loss_coef")
    else:
        for name in ("init_kl_coef", "kl_loss_coef"):
            if name in later:
                t.left_out.append((later[name].origin, "its switch is off (add_token_level_kl, use_kl_loss)"))
    if "dual_clip_loss" in later and truthy(later["dual_clip_loss"].value):
        clip = float(values.get("pg_clip", 0.2))
        t.set("loss.delta", 1 + 2 * clip, f"{later['dual_clip_loss'].origin}: ROLL's dual clip at 1 + 2 x pg_clip")


def _mini_batches(t: Translation) -> None:
    """ROLL's optimizer steps per rollout: the rollout batch's samples over the global train batch
    (per_device_train_batch_size x gradient_accumulation_steps x data-parallel ranks)."""
    later = t.later
    per = later.get("per_device_train_batch_size")
    accumulate = later.get("gradient_accumulation_steps")
    devices = _devices(later["device_mapping"].value) if "device_mapping" in later else None
    if per is None and accumulate is None:
        return
    parallel = 1
    for name in _PARALLEL:
        parallel *= int(later[name].value) if name in later else 1
    samples = t.get("rollout.num_unique_prompts_rollout", 128) * t.get("rollout.num_samples_per_prompt_rollout", 8)
    ranks = (devices or 1) // parallel
    batch = int(per.value if per else 1) * int(accumulate.value if accumulate else 1) * max(1, ranks)
    arithmetic = (f"{samples} samples / ({per.origin if per else 'per_device_train_batch_size 1'} x "
                  f"{accumulate.origin if accumulate else 'gradient_accumulation_steps 1'} x {ranks} ranks)")
    if batch and samples % batch == 0:
        t.set("algorithm.num_mini_batches", samples // batch, f"{arithmetic} (ROLL's global train batch)")
    else:
        t.by_hand.append((arithmetic, "set algorithm.num_mini_batches: optimizer steps per rollout batch"))
