"""Cross-section rules of a structured :class:`RunConfig`.

Each rule is a small function ``(cfg) -> list[ConfigIssue]`` in :data:`INVARIANTS`; add a rule by
writing one and appending it. Rules of a component live with that component: its own options in
its ``Config`` (attrs validators), rules involving other sections in the ``Config``'s
``check_run`` (:class:`~grpo_run.ChecksRunConfig`), collected here by :func:`component_rules`.
The core never names a component.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from grpo_run.core.config.abilities import ChecksRunConfig
from grpo_run.core.config.data_rules import DATA_RULES
from grpo_run.core.config.environment_rules import environment_rules
from grpo_run.core.config.placement_rules import PLACEMENT_RULES
from grpo_run.core.config.schema import RunConfig
from grpo_run.core.errors import ConfigIssue
from grpo_run.core.plugins.abilities import ShapingConfig
from grpo_run.core.plugins.families import FAMILIES
from grpo_run.core.plugins.types import VerifierConfig

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
    """Without an additive verifier of positive weight every reward is zero (a gate only
    replaces rewards that other verifiers made)."""
    configs = cfg.verifiers.values()
    if any(_weight(c) > 0 and _mode(c) != "gate" for c in configs):
        return []
    if any(_mode(c) == "gate" for c in configs):
        return [
            ConfigIssue(
                "verifiers",
                'every enabled verifier is a gate (mode = "gate") or has weight 0; a gate only replaces '
                "rewards, so enable an additive verifier with weight > 0",
            )
        ]
    if cfg.verifiers:
        return [ConfigIssue("verifiers", "every enabled verifier has weight 0; give one a weight > 0")]
    return [ConfigIssue("verifiers", "no verifier enabled; add a table such as [verifiers.math]")]


def rows_scored_without_their_verifiers(cfg: RunConfig) -> list[ConfigIssue]:
    """With the rows' ``verifier`` column ignored, only verifiers that score every row give rewards."""
    if cfg.scoring.row_verifiers or any(isinstance(c, ShapingConfig) and c.all_rows for c in cfg.verifiers.values()):
        return []
    return [ConfigIssue("scoring.row_verifiers", "is false, so only verifiers that score every row (all_rows = true) "
                        "give rewards, and none of the enabled ones does")]


def correctness_verifiers_are_enabled(cfg: RunConfig) -> list[ConfigIssue]:
    """``scoring.correctness_verifiers`` as a list names verifiers the run enables."""
    names = cfg.scoring.correctness_verifiers
    if isinstance(names, str):
        return []
    if not names:
        return [ConfigIssue("scoring.correctness_verifiers", 'is empty; name verifiers (e.g. ["math"]), or use '
                            '"auto" (those the rows name) or "reward" (the whole reward reaching its maximum)')]
    unknown = [name for name in names if name not in cfg.verifiers]
    if not unknown:
        return []
    enabled = ", ".join(cfg.verifiers) or "none"
    return [ConfigIssue("scoring.correctness_verifiers", f"names {', '.join(map(repr, unknown))}, not an enabled "
                        f"verifier (enabled: {enabled})")]


def _weight(config: Any) -> float:
    return float(config.weight) if isinstance(config, VerifierConfig) else 1.0


def _mode(config: Any) -> str:
    return config.mode if isinstance(config, ShapingConfig) else "additive"


def loss_denominator_is_token_or_positive(cfg: RunConfig) -> list[ConfigIssue]:
    """A constant denominator replaces a token count: it must be a positive finite number."""
    alg = cfg.algorithm
    value = alg.loss_denominator
    if value == "token":
        return []
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not is_number or not (math.isfinite(value) and value > 0):
        return [ConfigIssue("algorithm.loss_denominator", f'must be "token" or a positive number, got {value!r}')]
    if alg.loss_aggregation == "seq-mean-token-sum":
        return [
            ConfigIssue(
                "algorithm.loss_denominator",
                f"a number ({value!r}) replaces a token count, and loss_aggregation = \"seq-mean-token-sum\" "
                'has none; use "token-mean" (sum / C) or "seq-mean-token-mean" (per-sequence sum / C)',
            )
        ]
    return []


def kl_penalty_needs_reference(cfg: RunConfig) -> list[ConfigIssue]:
    """A KL penalty is measured against a reference policy."""
    if cfg.kl.reference != "none" or cfg.kl.beta == 0:
        return []
    return [
        ConfigIssue(
            "kl.reference",
            f'is "none" but kl.beta = {cfg.kl.beta} > 0 (a KL penalty needs a reference policy): '
            'set kl.beta = 0 or kl.reference = "frozen" / "polyak"',
        )
    ]


def engine_logprobs_exclude_mismatch_correction(cfg: RunConfig) -> list[ConfigIssue]:
    """With pi_old = pi_engine the mismatch ratio is 1 by construction: the correction would be a no-op."""
    alg = cfg.algorithm
    if not alg.use_engine_logprobs_as_old or alg.mismatch_correction == "none":
        return []
    return [
        ConfigIssue(
            "algorithm.mismatch_correction",
            f'must be "none" when algorithm.use_engine_logprobs_as_old is true (got {alg.mismatch_correction!r}): '
            "the correction needs pi_old from the learner, and engine log-probs as pi_old make the ratio 1",
        )
    ]


def checkpoint_dir_needs_saving(cfg: RunConfig) -> list[ConfigIssue]:
    """A checkpoint directory and a save frequency (or the final save) go together."""
    ck = cfg.checkpoint
    if ck.dir is None or ck.save_freq > 0 or ck.save_final:
        return []
    return [
        ConfigIssue(
            "checkpoint.dir",
            "is set but nothing is saved there: set checkpoint.save_freq > 0 or checkpoint.save_final = true",
        )
    ]


def lora_reference_is_the_base_model(cfg: RunConfig) -> list[ConfigIssue]:
    """With LoRA the reference is the base model with the adapters off: it cannot move."""
    if cfg.model.lora is None or cfg.kl.reference != "polyak":
        return []
    return [
        ConfigIssue(
            "kl.reference",
            'is "polyak", but with [model.lora] the reference policy is the base model with the adapters '
            'disabled and cannot be moved towards the policy: use "frozen" (or drop [model.lora])',
        )
    ]


def lora_trains_in_one_process(cfg: RunConfig) -> list[ConfigIssue]:
    """LoRA's merged weights, adapter checkpoints and adapter-off reference are built for one
    learner process; several ranks would each hold a peft model that no strategy shards yet."""
    if cfg.model.lora is None or cfg.learner.num_learners == 1:
        return []
    return [
        ConfigIssue(
            "learner.num_learners",
            f"is {cfg.learner.num_learners}, but [model.lora] trains in one learner process for now: "
            "set learner.num_learners = 1 (or drop [model.lora] for data-parallel full fine-tuning)",
        )
    ]


def component_rules(cfg: RunConfig) -> list[ConfigIssue]:
    """Rules a component contributes through its ``Config`` (:class:`~grpo_run.ChecksRunConfig`):
    the chosen loss, KL estimator, sampler, engine and task, and every enabled verifier and
    tracker. A rule that raises is reported as an issue naming the component."""
    issues: list[ConfigIssue] = []
    for where, config in _component_configs(cfg):
        if not isinstance(config, ChecksRunConfig):
            continue
        try:
            found = list(config.check_run(cfg))
        except Exception as exc:  # a plugin's rule is plugin code: name it, do not crash
            found = [ConfigIssue(where, f"its config check raised {type(exc).__name__}: {exc}")]
        for issue in found:
            if not isinstance(issue, ConfigIssue):
                issue = ConfigIssue(where, str(issue))
            issues.append(issue)
    return issues


def _component_configs(cfg: RunConfig) -> list[tuple[str, Any]]:
    """(key path, config) of every chosen or enabled component."""
    out: list[tuple[str, Any]] = []
    for fam in FAMILIES:
        if fam.slot is None:
            continue
        value = getattr(cfg, fam.slot)
        if fam.many:
            out.extend((f"{fam.slot}.{name}", conf) for name, conf in value.items())
        elif value is not None:
            out.append((fam.slot, value.config))
    return out


INVARIANTS: tuple[Invariant, ...] = (
    pack_length_fits_one_sequence,
    groups_can_have_spread,
    some_reward_enabled,
    rows_scored_without_their_verifiers,
    correctness_verifiers_are_enabled,
    *DATA_RULES,
    loss_denominator_is_token_or_positive,
    kl_penalty_needs_reference,
    engine_logprobs_exclude_mismatch_correction,
    checkpoint_dir_needs_saving,
    lora_reference_is_the_base_model,
    lora_trains_in_one_process,
    *PLACEMENT_RULES,
    environment_rules,
    component_rules,
)
"""Every cross-section rule, checked in order after structuring. ``kl.beta > 0`` needing a KL
estimator is enforced while structuring: ``kl.name`` must always name a registered one."""


def check_invariants(cfg: RunConfig, invariants: Sequence[Invariant] = INVARIANTS) -> list[ConfigIssue]:
    """The issues of every rule in ``invariants`` (all of them, not just the first)."""
    return [issue for rule in invariants for issue in rule(cfg)]
