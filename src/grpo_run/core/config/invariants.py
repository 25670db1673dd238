"""Cross-section rules of a structured :class:`RunConfig`.

Each rule is a small function ``(cfg) -> list[ConfigIssue]`` in :data:`INVARIANTS`; add a rule by
writing one and appending it. Rules that concern a single component's options belong in that
component's ``Config`` (attrs validators or ``__attrs_post_init__``), not here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from grpo_run.core.config.formatting import ConfigIssue
from grpo_run.core.config.schema import RunConfig
from grpo_run.core.registry import did_you_mean

Invariant = Callable[[RunConfig], list[ConfigIssue]]


def pack_length_fits_one_sequence(cfg: RunConfig) -> list[ConfigIssue]:
    """A packed row must hold at least one full prompt plus completion."""
    need = cfg.data.max_prompt_token_length + cfg.rollout.response_length
    if cfg.algorithm.pack_length >= need:
        return []
    return [
        ConfigIssue(
            "algorithm.pack_length",
            f"must be >= data.max_prompt_token_length + rollout.response_length "
            f"({cfg.data.max_prompt_token_length} + {cfg.rollout.response_length} = {need}), "
            f"got {cfg.algorithm.pack_length}",
        )
    ]


def groups_can_have_spread(cfg: RunConfig) -> list[ConfigIssue]:
    """Filtering zero-std groups would drop every group of a single sample."""
    n = cfg.rollout.num_samples_per_prompt_rollout
    if not cfg.algorithm.filter_zero_std_samples or n >= 2:
        return []
    return [
        ConfigIssue(
            "rollout.num_samples_per_prompt_rollout",
            f"must be >= 2 when algorithm.filter_zero_std_samples is true "
            f"(a group of {n} always has zero std), got {n}",
        )
    ]


def some_reward_enabled(cfg: RunConfig) -> list[ConfigIssue]:
    """Without a verifier of positive weight every reward is zero."""
    if any(getattr(c, "weight", 1.0) > 0 for c in cfg.verifiers.values()):
        return []
    if cfg.verifiers:
        return [ConfigIssue("verifiers", "every enabled verifier has weight 0; give one a weight > 0")]
    return [ConfigIssue("verifiers", "no verifier enabled; add a table such as [verifiers.math]")]


def one_data_source(cfg: RunConfig) -> list[ConfigIssue]:
    """Training rows come from exactly one of a task, local files or a Hugging Face dataset."""
    given = [
        label
        for label, present in (
            ("[task]", cfg.task is not None),
            ("data.train_files", bool(cfg.data.train_files)),
            ("data.hf_dataset", cfg.data.hf_dataset is not None),
        )
        if present
    ]
    if len(given) == 1:
        return []
    if not given:
        return [ConfigIssue("data", "no training data: set one of [task], data.train_files or data.hf_dataset")]
    return [ConfigIssue("data", f"more than one training data source given ({', '.join(given)}); choose one")]


def eval_files_need_train_files(cfg: RunConfig) -> list[ConfigIssue]:
    """A task brings its own eval rows and a Hugging Face dataset uses ``hf_eval_split``."""
    if not cfg.data.eval_files or cfg.data.train_files:
        return []
    return [
        ConfigIssue(
            "data.eval_files",
            "only allowed together with data.train_files (a task makes its own eval rows; "
            "with data.hf_dataset use data.hf_eval_split)",
        )
    ]


def hf_eval_split_needs_hf_dataset(cfg: RunConfig) -> list[ConfigIssue]:
    """An eval split of no dataset would be silently ignored."""
    if cfg.data.hf_eval_split is None or cfg.data.hf_dataset is not None:
        return []
    return [ConfigIssue("data.hf_eval_split", "only allowed together with data.hf_dataset")]


def eval_needs_eval_rows(cfg: RunConfig) -> list[ConfigIssue]:
    """Periodic evaluation needs somewhere to take eval prompts from."""
    has_eval = cfg.task is not None or bool(cfg.data.eval_files) or cfg.data.hf_eval_split is not None
    if cfg.train.local_eval_every == 0 or has_eval:
        return []
    return [
        ConfigIssue(
            "train.local_eval_every",
            f"is {cfg.train.local_eval_every} but there are no eval rows: set data.eval_files or "
            "data.hf_eval_split (a [task] has its own), or set train.local_eval_every = 0",
        )
    ]


def default_verifier_is_enabled(cfg: RunConfig) -> list[ConfigIssue]:
    """Rows without a ``verifier`` column must be scored by a verifier that is configured."""
    name = cfg.data.default_verifier
    if name is None or name in cfg.verifiers:
        return []
    enabled = sorted(cfg.verifiers)
    return [
        ConfigIssue(
            "data.default_verifier",
            f"{name!r} is not an enabled verifier{did_you_mean(name, enabled)}; "
            f"enabled: {', '.join(enabled) or 'none'} (enable one with a [verifiers.<name>] table)",
        )
    ]


def warmup_within_training(cfg: RunConfig) -> list[ConfigIssue]:
    """Warm-up longer than the run would never reach the configured learning rate."""
    if cfg.optim.warmup_steps <= cfg.train.total_steps:
        return []
    return [
        ConfigIssue(
            "optim.warmup_steps",
            f"must be <= train.total_steps ({cfg.train.total_steps}), got {cfg.optim.warmup_steps}",
        )
    ]


INVARIANTS: tuple[Invariant, ...] = (
    pack_length_fits_one_sequence,
    groups_can_have_spread,
    some_reward_enabled,
    one_data_source,
    eval_files_need_train_files,
    hf_eval_split_needs_hf_dataset,
    eval_needs_eval_rows,
    default_verifier_is_enabled,
    warmup_within_training,
)
"""Every cross-section rule, checked in order after structuring. ``kl.beta > 0`` needing a KL
estimator is enforced while structuring: ``kl.name`` must always name a registered one."""


def check_invariants(cfg: RunConfig, invariants: Sequence[Invariant] = INVARIANTS) -> list[ConfigIssue]:
    """The issues of every rule in ``invariants`` (all of them, not just the first)."""
    return [issue for rule in invariants for issue in rule(cfg)]
