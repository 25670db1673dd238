"""Open Instruct's ``grpo_fast``: its dataset mixer lists, episodes, the rank-and-mini-batch
scaling of a constant loss denominator, its reward switches and its defaults."""

from __future__ import annotations

from typing import Any

from grpo_run.cli.porting.common import finish_common, take_warmup_ratio
from grpo_run.cli.porting.translate import Handler, Setting, Translation
from grpo_run.core.config.peer_tables.entry import truthy

DEFAULTS: tuple[tuple[str, str, Any], ...] = (
    # (grpo-run key, Open Instruct's name, its default where grpo-run's differs): the seed documents'
    # StreamingDataLoaderConfig and the experiment dataclass of grpo_fast.
    ("rollout.response_length", "response_length", 256),
    ("rollout.num_samples_per_prompt_rollout", "num_samples_per_prompt_rollout", 4),
    ("rollout.temperature", "temperature", 0.7),
    ("scoring.verification_reward", "verification_reward", 10.0),
    ("optim.lr", "learning_rate", 2e-5),
    ("optim.lr_scheduler", "lr_scheduler_type", "linear"),
    ("kl.beta", "beta", 0.05),
    ("loss.clip_higher", "clip_higher", 0.2),
    ("train.local_eval_every", "local_eval_every", 100),
    ("checkpoint.save_freq", "save_freq", 200),
)
_EPISODES = 100_000
_LOCAL = (".jsonl", ".json", ".parquet", ".csv")


def _verifier_of(dataset: str) -> str | None:
    """The grpo-run verifier an Open Instruct RLVR dataset's rows ask for, from its name."""
    name = dataset.lower()
    if "gsm8k" in name or "math" in name:
        return "math"
    if "ifeval" in name or "ifbench" in name or "_if_" in name:
        return "ifeval"
    if "code" in name:
        return "code"
    return None


def _mixer(t: Translation, path: str, value: Any) -> bool:
    which = "eval" if "eval" in path else "train"
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if len(items) % 2:
        t.by_hand.append((t.written(path, value), "expected pairs of a dataset and an amount"))
        return True
    for name, amount in zip(items[::2], items[1::2], strict=True):
        fields: dict[str, Any] = {"path": name} if str(name).endswith(_LOCAL) else {"hf_dataset": name}
        number = float(amount)
        if "." in str(amount) or number <= 1.0:
            if number != 1.0:
                fields["weight"] = number
        else:
            fields["rows"] = int(number)
        verifier = _verifier_of(str(name))
        if verifier is not None:
            fields["verifier"] = verifier
        else:
            t.by_hand.append((f"{name}", "name the verifier its rows need: data.{which}.verifier"))
        t.add_source(which, fields, t.written(path, [name, amount]))
    return True


def _splits(t: Translation, path: str, value: Any) -> bool:
    t.later["splits_" + ("eval" if "eval" in path else "train")] = Setting(
        value if isinstance(value, list) else [value], t.written(path, value))
    return True


def _learners(t: Translation, path: str, value: Any) -> bool:
    counts = [int(v) for v in (value if isinstance(value, list) else [value])]
    t.set("learner.num_learners", sum(counts), t.written(path, value))
    if len(counts) > 1:
        t.by_hand.append((t.written(path, value), "several nodes: give each node's learners a custom Ray resource "
                                                  "(distributed.learner_resources, docs/scale-out.md)"))
    return True


def _non_stop(t: Translation, path: str, value: Any) -> bool:
    if path.endswith("non_stop_penalty") and truthy(value):
        given = t.values.get("non_stop_penalty_value", 0.0)
        t.set("verifiers.non_stop_penalty.mode", "gate", t.written(path, value))
        t.set("verifiers.non_stop_penalty.gate_fail_reward", float(given),
              "--non_stop_penalty_value" + (f" {given}" if "non_stop_penalty_value" in t.values else
                                            " (Open Instruct's default 0.0)"))
    return True


def _taken(t: Translation, path: str, value: Any) -> bool:
    """Read in :func:`finish` (it needs other settings)."""
    return True


HANDLERS: dict[str, Handler] = {
    "dataset_mixer_list": _mixer,
    "dataset_mixer_eval_list": _mixer,
    "dataset_mixer_list_splits": _splits,
    "dataset_mixer_eval_list_splits": _splits,
    "num_learners_per_node": _learners,
    "non_stop_penalty": _non_stop,
    "non_stop_penalty_value": _non_stop,
    "total_episodes": _taken,
    "loss_denominator": _taken,
    "masked_mean_denominator": _taken,
    "apply_verifiable_reward": _taken,
    "with_tracking": _taken,
    "push_to_hub": _taken,
    "hf_entity": _taken,
    "hf_repo_id": _taken,
    "warmup_ratio": take_warmup_ratio,
}


def finish(t: Translation) -> None:
    values = t.values
    for path, name, default in DEFAULTS:
        if name in values or t.has(path) or (path == "loss.clip_higher" and t.get("loss.name", "dapo") != "dapo") \
                or (path == "train.local_eval_every" and not t.sources["eval"]):
            continue
        t.set(path, default, f"Open Instruct's default ({name})")
    _sources(t)
    _steps(t, values)
    _denominator(t, values)
    _rewards(t, values)
    _tracking_and_hub(t, values)
    if t.get("algorithm.advantage_normalization_type", "standard") == "standard":
        t.set("algorithm.advantage_std", "population", "parity: Open Instruct divides by numpy's std (n), "
              "grpo-run by default by the sample std (n - 1)")
        t.parity.append('algorithm.advantage_std = "population": Open Instruct normalises advantages by the '
                        "population std (numpy's .std(), n); grpo-run's default is the sample std (n - 1)")
    finish_common(t)


def _sources(t: Translation) -> None:
    for which in ("train", "eval"):
        splits = t.later.pop(f"splits_{which}", None)
        hub = [s for s in t.sources[which] if "hf_dataset" in s]
        if splits is not None:
            names = splits.value if len(splits.value) == len(hub) else [splits.value[0]] * len(hub)
            for source, split in zip(hub, names, strict=True):
                source["split"] = Setting(split, splits.origin)
        elif which == "eval":  # Open Instruct's default eval split
            for source in hub:
                source["split"] = Setting("test", "Open Instruct's default (dataset_mixer_eval_list_splits)")


def _steps(t: Translation, values: dict[str, Any]) -> None:
    prompts = t.get("rollout.num_unique_prompts_rollout", 16)
    samples = t.get("rollout.num_samples_per_prompt_rollout", 4)
    episodes = int(values.get("total_episodes", _EPISODES))
    origin = (f"--total_episodes {episodes}" if "total_episodes" in values else f"Open Instruct's default total_episodes {episodes}")
    if not t.has("train.total_steps"):
        t.set("train.total_steps", max(1, episodes // (prompts * samples)),
              f"{origin} / ({prompts} prompts x {samples} samples)")


def _denominator(t: Translation, values: dict[str, Any]) -> None:
    raw = values.get("loss_denominator", values.get("masked_mean_denominator", "token"))
    if str(raw) == "token":
        return
    try:
        constant = float(raw)
    except ValueError:
        t.left_out.append((f"--loss_denominator {raw}", 'must be "token" or a positive number'))
        return
    minis = t.get("algorithm.num_mini_batches", 1)
    t.set("algorithm.loss_denominator", constant * minis,
          f"--loss_denominator {raw} x {minis} mini-batches (parity)")
    t.parity.append(f"algorithm.loss_denominator = {constant * minis:g}: Open Instruct's constant {raw} covers one "
                    f"optimizer step; grpo-run's covers the rollout batch, {minis} mini-batches (docs/algorithms.md, "
                    '"Mini-batches, ranks and the constant denominator")')


def _rewards(t: Translation, values: dict[str, Any]) -> None:
    if truthy(values.get("apply_verifiable_reward", True)):
        for which in ("train", "eval"):
            for source in t.sources[which]:
                if "verifier" in source:
                    t.set(f"verifiers.{source['verifier'].value}", {}, "--apply_verifiable_reward (the verifier "
                          "its sources' rows need)", keep=True)
    reward = t.get("scoring.verification_reward", 1.0)
    if t.has("verifiers.format") and reward != 1.0:
        weight = float(values.get("r1_style_format_reward", 1.0))
        t.set("verifiers.format.weight", weight / reward,
              f"parity: --r1_style_format_reward {weight:g} / verification_reward {reward:g}")
        t.parity.append(f"verifiers.format.weight = {weight / reward:g}: scoring.verification_reward multiplies every "
                        "reward here, the format reward too; Open Instruct adds its format reward unscaled")


def _tracking_and_hub(t: Translation, values: dict[str, Any]) -> None:
    if truthy(values.get("with_tracking", False)):
        t.set("trackers.wandb.mode", "online", "--with_tracking (Open Instruct logs to W&B online)")
        t.set("trackers.wandb.project", values.get("wandb_project_name", values.get("wandb_project",
              "open_instruct_internal")), "--with_tracking" + ("" if "wandb_project_name" in values else
                                                               " (Open Instruct's default project)"), keep=True)
    name = values.get("hf_repo_id")
    entity = values.get("hf_entity")
    if truthy(values.get("push_to_hub", False)) and name:
        repo = name if "/" in str(name) or not entity else f"{entity}/{name}"
        t.set("checkpoint.push_to_hub.repo_id", repo, f"--push_to_hub --hf_entity {entity} --hf_repo_id {name}"
              if entity else f"--push_to_hub --hf_repo_id {name}")
    elif truthy(values.get("push_to_hub", False)):
        t.by_hand.append(("--push_to_hub", "add [checkpoint.push_to_hub] repo_id = \"<user>/<name>\" (Open Instruct "
                                           "builds a name from your Hub account)"))
