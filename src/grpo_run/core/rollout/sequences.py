"""From scored completions to learner sequences: group advantages, zero-signal filtering and
the per-batch rollout metrics."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import torch

from grpo_run.core.rollout.advantages import group_advantages, groups_with_spread, turn_advantages
from grpo_run.core.plugins.types import Completion, is_solved
from grpo_run.core.config.schema import AlgorithmSection
from grpo_run.core.rollout.episodes import Episode
from grpo_run.core.rollout.packing import SequenceToPack


@attrs.frozen
class RolloutGroup:
    """The G completions of one prompt, with their rewards."""

    row: Mapping[str, Any]
    prompt_ids: list[int]
    completions: list[Completion]
    rewards: list[float]
    max_reward: float
    scores: list[dict[str, float]] = attrs.Factory(list)
    """Each completion's unweighted score per verifier (empty when not recorded)."""
    solved: list[bool] = attrs.Factory(lambda self: [is_solved(r, self.max_reward) for r in self.rewards], takes_self=True)
    """Whether each completion solved the row (its correctness verifiers said right,
    :mod:`~grpo_run.core.scoring.correctness`); unset: its reward reached ``max_reward``."""

    @property
    def has_spread(self) -> bool:
        """Whether the rewards have a spread (:func:`~grpo_run.core.rollout.advantages.groups_with_spread`)."""
        return bool(groups_with_spread(torch.tensor([self.rewards], dtype=torch.float64))[0])


@attrs.frozen
class RolloutBatch:
    """One generated and scored batch, as it waits for the learner."""

    index: int
    """1-based batch number (the learner step that will consume it)."""
    groups: list[RolloutGroup]
    generation_s: float
    scoring_metrics: dict[str, float]
    scoring_tail_s: float = 0.0
    """Of ``generation_s``, the time after the engine finished that was spent waiting for the
    last groups to be scored (scoring that overlapped generation is not in it)."""
    failure: str | None = None
    """The batch's first failed episode, with its environment and row (None when none failed)."""


@attrs.frozen
class GroupSignal:
    """What a batch's rewards say to the learner: each completion's advantage and which groups
    are kept (the others were dropped for zero reward spread)."""

    advantages: torch.Tensor
    """``[groups, G]`` float64."""
    keep: torch.Tensor
    """``[groups]`` bool."""


def group_signal(batch: RolloutBatch, alg: AlgorithmSection) -> GroupSignal | None:
    """Advantages per group and the zero-std filter; None for a batch without groups."""
    if not batch.groups:
        return None
    rewards = torch.tensor([g.rewards for g in batch.groups], dtype=torch.float64)  # [groups, G]
    advantages = group_advantages(rewards, alg.advantage_normalization_type, alg.advantage_eps, std=alg.advantage_std)
    keep = groups_with_spread(rewards) if alg.filter_zero_std_samples else torch.ones(len(batch.groups), dtype=torch.bool)
    return GroupSignal(advantages, keep)


def build_sequences(
    batch: RolloutBatch, alg: AlgorithmSection, *, learner_version: int, signal: GroupSignal | None = None
) -> tuple[list[SequenceToPack], dict[str, float]]:
    """Advantages per group, zero-std filtering, masking; returns sequences and metrics.

    ``signal``: the batch's :func:`group_signal`, when the caller computed it already."""
    if not batch.groups:  # active sampling found no group with a reward spread
        return [], {"rollout/real_batch_size_ratio": 0.0, "rollout/sequences_trained": 0.0}
    rewards = torch.tensor([g.rewards for g in batch.groups], dtype=torch.float64)  # [groups, G]
    signal = signal if signal is not None else group_signal(batch, alg)
    assert signal is not None
    advantages, keep = signal.advantages, signal.keep
    seqs: list[SequenceToPack] = []
    all_completions = [c for g in batch.groups for c in g.completions]
    for gi, group in enumerate(batch.groups):
        if not keep[gi]:
            continue
        per_turn = _turn_advantages(group, alg)
        for ci, comp in enumerate(group.completions):
            if not comp.token_ids:
                continue
            loss_mask = not (alg.mask_truncated_completions and comp.finish_reason != "stop")
            if isinstance(comp, Episode):  # every segment trains with the episode's advantage
                seqs.extend(episode_sequences(comp, float(advantages[gi, ci]), loss_mask, first_id=len(seqs),
                                              turn_advantages=per_turn[ci] if per_turn else None))
                continue
            seqs.append(
                SequenceToPack(
                    prompt_ids=list(group.prompt_ids),
                    completion_ids=list(comp.token_ids),
                    advantage=float(advantages[gi, ci]),
                    engine_logprobs=list(comp.logprobs),
                    seq_id=len(seqs),
                    loss_mask=loss_mask,
                )
            )
    lengths = torch.tensor([len(c.token_ids) for c in all_completions], dtype=torch.float64)
    versions = [c.policy_version for c in all_completions]
    newest = [c.policy_versions[1] for c in all_completions]
    metrics = {
        "reward/mean": float(rewards.mean()),
        "reward/std": float(rewards.std()) if rewards.numel() > 1 else 0.0,
        "reward/solve_rate": sum(s for g in batch.groups for s in g.solved) / rewards.numel(),
        "rollout/real_batch_size_ratio": float(keep.double().mean()),
        "rollout/sequences_trained": float(len(seqs)),
        "rollout/response_length_mean": float(lengths.mean()),
        "rollout/stop_rate": sum(c.finish_reason == "stop" for c in all_completions) / max(1, len(all_completions)),
        "rollout/staleness_max": float(learner_version - min(versions)),
        "rollout/staleness_mean": float(learner_version - sum(versions) / len(versions)),
        # In-flight weight updates: a completion's tokens may come from several policy versions.
        "rollout/staleness_newest_mean": float(learner_version - sum(newest) / len(newest)),
        "rollout/mixed_version_rate": sum(n != o for n, o in zip(newest, versions)) / len(versions),
        "rollout/version_span_max": float(max(n - o for n, o in zip(newest, versions))),
        "advantage/abs_mean": float(advantages[keep].abs().mean()) if keep.any() else 0.0,
    }
    return seqs, metrics


def _turn_advantages(group: RolloutGroup, alg: AlgorithmSection) -> list[list[float]] | None:
    """Per-turn advantages of a group of episodes with returns-to-go (``advantage_granularity =
    "turn"``); None otherwise."""
    episodes = group.completions
    if not episodes or not all(isinstance(e, Episode) and e.returns for e in episodes):
        return None
    return turn_advantages(list(group.rewards), [list(e.returns) for e in episodes],  # type: ignore[union-attr]
                           alg.advantage_normalization_type, alg.advantage_eps, std=alg.advantage_std)


def episode_sequences(episode: Episode, advantage: float, loss_mask: bool, first_id: int,
                      turn_advantages: list[float] | None = None) -> list[SequenceToPack]:
    """One sequence per segment of ``episode``: its ids, NaN log-probs on ids the engine did not
    sample, and a per-token mask that keeps those out of the loss (unless trained on).

    ``turn_advantages``: one per turn; each token then gets its turn's (``Segment.turns``)."""
    def per_token(seg: Any) -> tuple[float, ...] | None:
        if turn_advantages is None:
            return None
        return tuple(turn_advantages[min(t, len(turn_advantages) - 1)] for t in seg.turns)

    return [
        SequenceToPack(
            prompt_ids=list(seg.prompt_ids),
            completion_ids=list(seg.completion_ids),
            advantage=advantage,
            engine_logprobs=list(seg.logprobs),
            seq_id=first_id + k,
            loss_mask=loss_mask,
            token_mask=seg.loss_mask(episode.train_on_env_tokens),
            token_advantages=per_token(seg),
        )
        for k, seg in enumerate(episode.segments)
        if seg.completion_ids
    ]
