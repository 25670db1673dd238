"""Cross-section rules of the ``[environment]`` and ``[renderer]`` tables."""

from __future__ import annotations

from grpo_run.core.config.schema import RunConfig
from grpo_run.core.errors import ConfigIssue


def environment_rules(cfg: RunConfig) -> list[ConfigIssue]:
    """A renderer needs an environment; trained environment tokens have no engine log-probs.

    An environment without a ``[renderer]`` uses the model's own chat format (chosen when the run
    is built: :mod:`grpo_run.core.loop.episode_setup`)."""
    env = cfg.environment
    if env is None:
        if cfg.renderer is not None:
            return [ConfigIssue("renderer", "is only used with an [environment] table; add one or remove [renderer]")]
        return []
    issues = []
    if env.max_tokens_per_turn is not None and env.max_tokens_per_turn > cfg.rollout.response_length:
        issues.append(ConfigIssue(
            "environment.max_tokens_per_turn",
            f"must be <= rollout.response_length ({cfg.rollout.response_length}), got {env.max_tokens_per_turn}"))
    if env.advantage_granularity == "turn" and env.reward_combination == "last":
        issues.append(ConfigIssue(
            "environment.advantage_granularity",
            '"turn" needs returns summed over turns: set environment.reward_combination to "sum" or "discounted"'))
    if env.max_worker_rss_mb and env.isolation != "process":
        issues.append(ConfigIssue(
            "environment.max_worker_rss_mb",
            'limits environment worker processes: set environment.isolation = "process" (or leave it 0)'))
    alg = cfg.algorithm
    if env.train_on_env_tokens and (alg.use_engine_logprobs_as_old or alg.mismatch_correction != "none"):
        issues.append(ConfigIssue(
            "environment.train_on_env_tokens",
            "cannot be combined with algorithm.use_engine_logprobs_as_old or algorithm.mismatch_correction: "
            "environment tokens have no engine log-probs"))
    return issues
