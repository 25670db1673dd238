"""Cross-section rules of the ``[data]`` section (collected into :data:`~grpo_run.core.config.invariants.INVARIANTS`)."""

from __future__ import annotations

import attrs

from grpo_run.core.config.schema import RunConfig, TrainSection
from grpo_run.core.errors import ConfigIssue
from grpo_run.core.plugins.registry import did_you_mean


def one_data_source(cfg: RunConfig) -> list[ConfigIssue]:
    """Training rows come from a task or from ``data.train`` sources, not both."""
    if (cfg.task is None) != (not cfg.data.train):
        return []
    if cfg.task is None:
        return [ConfigIssue("data", "no training data: set a [task], or add a [[data.train]] table with a path "
                                    "(or hf_dataset)")]
    return [ConfigIssue("data.train", "a [task] makes its own rows; remove [task] or the data.train sources")]


def eval_sources_need_train_sources(cfg: RunConfig) -> list[ConfigIssue]:
    """A task brings its own eval rows."""
    if not cfg.data.eval or cfg.task is None:
        return []
    return [ConfigIssue("data.eval", "a [task] makes its own eval rows; remove the data.eval sources")]


def eval_needs_eval_rows(cfg: RunConfig) -> list[ConfigIssue]:
    """Periodic evaluation needs somewhere to take eval prompts from: a value other than the
    default asks for it (a train-only config with the default just runs without evaluations)."""
    default = attrs.fields(TrainSection).local_eval_every.default
    if cfg.train.local_eval_every in (0, default) or cfg.task is not None or cfg.data.eval:
        return []
    return [
        ConfigIssue(
            "train.local_eval_every",
            f"is {cfg.train.local_eval_every} but there are no eval rows: add a [[data.eval]] source "
            "(a [task] has its own), or set train.local_eval_every = 0",
        )
    ]


def source_verifiers_are_enabled(cfg: RunConfig) -> list[ConfigIssue]:
    """A source's fixed ``verifier`` must be a configured one (unless rows' verifiers are plain
    data: ``scoring.row_verifiers = false``)."""
    if not cfg.scoring.row_verifiers:
        return []
    enabled = sorted(cfg.verifiers)
    issues = []
    for split in ("train", "eval"):
        for i, source in enumerate(getattr(cfg.data, split)):
            name = source.verifier
            if name is not None and name not in cfg.verifiers:
                issues.append(ConfigIssue(
                    f"data.{split}[{i}].verifier",
                    f"{name!r} is not an enabled verifier{did_you_mean(name, enabled)}; "
                    f"enabled: {', '.join(enabled) or 'none'} (enable one with a [verifiers.{name}] table)",
                ))
    return issues


def chat_options_agree(cfg: RunConfig) -> list[ConfigIssue]:
    """A system prompt is a chat message: it needs the chat template."""
    if cfg.data.apply_chat_template:
        return []
    return [
        ConfigIssue(f"data.{split}[{i}].system_prompt",
                    "needs data.apply_chat_template = true (a system prompt is a chat message)")
        for split in ("train", "eval")
        for i, source in enumerate(getattr(cfg.data, split))
        if source.system_prompt is not None
    ]


def eval_rows_do_not_repeat(cfg: RunConfig) -> list[ConfigIssue]:
    """Eval rows counted twice would skew eval/accuracy."""
    return [
        ConfigIssue(f"data.eval[{i}].weight", f"must be <= 1 for an eval source (rows would repeat), got {s.weight}")
        for i, s in enumerate(cfg.data.eval)
        if s.weight is not None and s.weight > 1
    ]


DATA_RULES = (
    one_data_source,
    eval_sources_need_train_sources,
    eval_needs_eval_rows,
    source_verifiers_are_enabled,
    chat_options_agree,
    eval_rows_do_not_repeat,
)
