"""What an episode leaves behind: its training segments, its rewards and its metrics.

An :class:`Episode` stands where a :class:`~grpo_run.Completion` stands in a
:class:`~grpo_run.core.rollout.sequences.RolloutGroup` (it has the same ``text``,
``finish_reason``, ``token_ids`` and policy versions), so scoring, advantages and group
statistics treat an episode as one sample, however many segments it trains as.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from grpo_run.core.plugins.types import is_solved


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
    turns: tuple[int, ...] = ()
    """Per completion id: the turn it belongs to (0-based; a bridge belongs to the turn it answers)."""

    def loss_mask(self, train_on_env_tokens: bool) -> tuple[bool, ...]:
        return (True,) * len(self.completion_ids) if train_on_env_tokens else self.sampled


@attrs.define
class OpenSegment:
    """The segment being built (episode runner, chat sessions)."""

    prompt: list[int]
    ids: list[int] = attrs.Factory(list)
    logprobs: list[float] = attrs.Factory(list)
    sampled: list[bool] = attrs.Factory(list)
    roles: list[str] = attrs.Factory(list)
    turns: list[int] = attrs.Factory(list)

    def add(self, ids: Sequence[int], logprobs: Sequence[float] | None, role: str, turn: int = 0) -> None:
        self.ids += ids
        self.turns += [turn] * len(ids)
        self.logprobs += list(logprobs) if logprobs is not None else [math.nan] * len(ids)
        self.sampled += [logprobs is not None] * len(ids)
        self.roles += [role] * len(ids)

    def close(self) -> Segment:
        return Segment(tuple(self.prompt), tuple(self.ids), tuple(self.logprobs), tuple(self.sampled), tuple(self.roles),
                       tuple(self.turns))


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
    turn_rewards: tuple[float, ...] = ()
    """The environment's reward of each turn it stepped (a turn cut by a budget has none)."""
    returns: tuple[float, ...] = ()
    """Return-to-go of each turn, set when ``environment.advantage_granularity = "turn"``
    (:func:`returns_to_go`); empty: the episode trains with one advantage."""
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


def returns_to_go(turn_rewards: Sequence[float], final: float, turns: int, discount: float = 1.0) -> tuple[float, ...]:
    """``G_t = sum_{t' >= t} discount**(t' - t) * r_t' + final`` for ``t < turns``.

    ``final`` (the verifiers' score and ``finish``) is not discounted, so ``G_0`` is exactly the
    episode's reward under ``reward_combination = "sum"`` (discount 1) or ``"discounted"``. A turn
    without a reward (cut by a budget) counts 0."""
    out = [0.0] * turns
    tail = 0.0
    for t in reversed(range(turns)):
        tail = (turn_rewards[t] if t < len(turn_rewards) else 0.0) + discount * tail
        out[t] = tail + final
    return tuple(out)


def derive_seed(*parts: Any) -> int:
    """A stable 31-bit seed from ``parts`` (same parts, same seed, in every process)."""
    digest = hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % (2**31 - 1)


ENV_SUCCESS = 1.0
"""The environment reward that solves an episode when only the environment rewards its row and
``environment.success_threshold`` is unset."""


def success_bar(verifier_max: float, threshold: float | None) -> float | None:
    """The whole reward (verifiers' + environment's) that solves an episode, or None when the
    verifiers' own verdict decides (no threshold, and they can reward the row)."""
    if threshold is not None:
        return threshold
    return None if verifier_max > 0 else ENV_SUCCESS


def episode_solved(verifiers_solved: bool, verifier_reward: float, verifier_max: float, env_reward: float,
                   threshold: float | None) -> bool:
    """Whether an episode solved its row (see ``environment.success_threshold``):
    ``verifiers_solved`` is the verifiers' verdict on its last turn, which decides when no
    threshold is set and they can reward the row."""
    bar = success_bar(verifier_max, threshold)
    if bar is None:
        return verifiers_solved
    return is_solved(verifier_reward + env_reward, bar)
