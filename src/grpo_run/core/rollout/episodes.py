"""What an episode leaves behind: its training segments, its rewards and its metrics.

An :class:`Episode` stands where a :class:`~grpo_run.Completion` stands in a
:class:`~grpo_run.core.rollout.sequences.RolloutGroup` (it has the same ``text``,
``finish_reason``, ``token_ids`` and policy versions), so scoring, advantages and group
statistics treat an episode as one sample, however many segments it trains as.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import attrs


@attrs.frozen
class Segment:
    """One training sequence of an episode: a rendered prompt, then the ids appended after it.

    An episode is one segment unless a bridge was impossible (the template is not
    prefix-preserving): the conversation is then rendered afresh as the next segment's prompt.
    """

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    """Sampled ids and, between turns, the bridge ids of environment messages."""
    logprobs: tuple[float, ...]
    """Engine log-prob of each sampled id; NaN on ids the engine did not sample."""
    sampled: tuple[bool, ...]
    """True on ids the engine sampled."""
    roles: tuple[str, ...] = ()
    """Per completion id: ``"assistant"`` or ``"environment"`` (traces)."""

    def loss_mask(self, train_on_env_tokens: bool) -> tuple[bool, ...]:
        return (True,) * len(self.completion_ids) if train_on_env_tokens else self.sampled


@attrs.frozen
class Episode:
    """A finished episode (a group sample)."""

    segments: tuple[Segment, ...]
    text: str
    """The last assistant turn's text: what the row's verifiers score."""
    finish_reason: str
    """``"length"`` when a budget cut the episode (a turn, or the total tokens), else ``"stop"``."""
    policy_version: int
    """Oldest policy version among its turns (staleness counts from it)."""
    last_policy_version: int | None
    env_reward: float
    """Per-turn rewards combined, plus ``finish``'s."""
    turns: int
    messages: tuple[Mapping[str, Any], ...]
    metrics: Mapping[str, float] = attrs.field(factory=dict)
    train_on_env_tokens: bool = False
    """Whether environment ids count in the loss (``environment.train_on_env_tokens``)."""
    turn_versions: tuple[tuple[int, int], ...] = ()
    """Per assistant turn, in order: the first and last policy version that sampled it (in-flight
    updates can land between turns, and within one)."""

    @property
    def token_ids(self) -> tuple[int, ...]:
        """Every id after the first prompt: sampled and environment ids of all segments."""
        return tuple(i for s in self.segments for i in s.completion_ids)

    @property
    def logprobs(self) -> tuple[float, ...]:
        return tuple(x for s in self.segments for x in s.logprobs)

    @property
    def policy_versions(self) -> tuple[int, int]:
        last = self.policy_version if self.last_policy_version is None else self.last_policy_version
        return self.policy_version, last


def failed_episode() -> Episode:
    """What stands for an episode that failed where a result is still needed (evaluation): no
    ids, no text, finish reason ``"error"``."""
    return Episode(segments=(), text="", finish_reason="error", policy_version=0, last_policy_version=None,
                   env_reward=0.0, turns=0, messages=())


def combine_rewards(rewards: Sequence[float], how: str, discount: float = 1.0) -> float:
    """Per-turn rewards as one number: ``last``, ``sum`` or ``discounted`` (sum of gamma^t r_t)."""
    if not rewards:
        return 0.0
    if how == "last":
        return float(rewards[-1])
    if how == "sum":
        return float(sum(rewards))
    if how == "discounted":
        return float(sum(r * discount**t for t, r in enumerate(rewards)))
    raise ValueError(f"unknown reward combination {how!r}")


def derive_seed(*parts: Any) -> int:
    """A stable 31-bit seed from ``parts`` (same parts, same seed, in every process)."""
    digest = hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % (2**31 - 1)
