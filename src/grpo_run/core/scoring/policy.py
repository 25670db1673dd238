"""How the scorer treats each enabled verifier, read once from its class and config.

The verifier contract (:class:`~grpo_run.Verifier` and the abilities ``BatchVerifier``,
``CapsBatchSize``, ``DeclaresScoreRange``, ``ShapingConfig``) lets a verifier be sync or async,
batched, declare a score range, gate the reward and score every row. This module reads those
once into one :class:`VerifierPolicy` per verifier, so the rest of the runtime asks the policy.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import attrs

from grpo_run.core.plugins.abilities import (
    BatchVerifier,
    CapsBatchSize,
    DeclaresScoreRange,
    OwnWorker,
    RescalesScores,
    ShapingConfig,
)
from grpo_run.core.plugins.contracts import Verifier
from grpo_run.core.plugins.types import REWARD_LIMIT, VerifierConfig, reward_interval

DEFAULT_SCORE_RANGE = (0.0, 1.0)
DEFAULT_MAX_BATCH_SIZE = 64


@attrs.frozen
class VerifierPolicy:
    """What the scorer needs to know about one enabled verifier."""

    name: str
    weight: float
    gate: bool
    """``mode = "gate"``: the verifier can replace the row's reward, it never adds to it."""
    gate_fail_reward: float
    all_rows: bool
    """Scores every row, not only the rows that name it."""
    score_range: tuple[float, float]
    is_async: bool
    """Runs on the event loop of the scorer's process instead of a worker process."""
    batched: bool
    """Has ``score_batch``: its calls go in batches of at most ``max_batch_size``."""
    max_batch_size: int
    rescaled: bool = False
    """Returns raw scores that a :class:`~grpo_run.ScoreRescaler` turns into scores in the
    training process: the worker only checks that they are finite and within ``REWARD_LIMIT``."""
    own_worker: bool = False
    """Runs in a scoring worker (or Ray actor) of its own; its batches are not split to spread."""

    @property
    def returned_range(self) -> tuple[float, float]:
        """The interval the verifier's own return values must lie in."""
        return (-REWARD_LIMIT, REWARD_LIMIT) if self.rescaled else self.score_range

    @property
    def max_contribution(self) -> float:
        """The most this verifier adds to a row's reward before ``verification_reward``."""
        return 0.0 if self.gate else self.weight * self.score_range[1]


def score_range_of(cls: type, config: Any) -> tuple[float, float]:
    """The verifier's declared score range: the config's ``score_range``, else the class's, else [0, 1]."""
    if isinstance(config, DeclaresScoreRange):
        declared: Any = config.score_range
    elif isinstance(cls, DeclaresScoreRange):
        declared = cls.score_range
    else:
        declared = DEFAULT_SCORE_RANGE
    try:
        return reward_interval(declared)
    except ValueError as exc:
        raise ValueError(f"score_range {exc}") from None


def _weight_of(config: Any, score_range: tuple[float, float]) -> float:
    """The config's weight, checked here too: a plugin's config may redeclare ``weight`` without
    :class:`VerifierConfig`'s validator."""
    weight = float(config.weight) if isinstance(config, VerifierConfig) else 1.0
    if not 0.0 <= weight <= REWARD_LIMIT:
        raise ValueError(f"weight must be a number in [0, {REWARD_LIMIT:g}], got {weight}")
    if weight * max(abs(x) for x in score_range) > REWARD_LIMIT:
        raise ValueError(f"weight x score_range reaches {weight * max(abs(x) for x in score_range):g} "
                         f"(weight {weight:g}, score_range {list(score_range)}), past {REWARD_LIMIT:g}; "
                         "scale the weight or the scores down")
    return weight


def verifier_policy(name: str, cls: type, config: Any) -> VerifierPolicy:
    """Read a verifier's policy; :class:`ValueError` (naming the verifier) when it is inconsistent."""
    try:
        shaping = isinstance(config, ShapingConfig)
        mode = config.mode if shaping else "additive"
        if mode not in ("additive", "gate"):
            raise ValueError(f"mode must be 'additive' or 'gate', got {mode!r}")
        batched = isinstance(cls, BatchVerifier)
        if not batched and not isinstance(cls, Verifier):
            raise ValueError("has neither score nor score_batch")
        is_async = inspect.iscoroutinefunction(cls.score_batch if batched else cls.score)
        capped = config if isinstance(config, CapsBatchSize) else cls if isinstance(cls, CapsBatchSize) else None
        max_batch = int(capped.max_batch_size) if capped is not None else DEFAULT_MAX_BATCH_SIZE
        if max_batch < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch}")
        score_range = score_range_of(cls, config)
        gate_fail_reward = float(config.gate_fail_reward) if shaping else 0.0
        if not abs(gate_fail_reward) <= REWARD_LIMIT:
            raise ValueError(f"gate_fail_reward must be a number in [-{REWARD_LIMIT:g}, {REWARD_LIMIT:g}], "
                             f"got {gate_fail_reward}")
        return VerifierPolicy(
            name=name,
            weight=_weight_of(config, score_range),
            gate=mode == "gate",
            gate_fail_reward=gate_fail_reward,
            all_rows=bool(config.all_rows) if shaping else False,
            score_range=score_range,
            is_async=is_async,
            batched=batched,
            max_batch_size=max_batch,
            rescaled=isinstance(config, RescalesScores),
            own_worker=isinstance(config, OwnWorker),
        )
    except ValueError as exc:
        raise ValueError(f"verifier {name!r}: {exc}") from None


def max_possible_score(policies: Mapping[str, VerifierPolicy], verification_reward: float) -> float:
    """The most a row naming one verifier can score: the best routed additive verifier plus every
    additive verifier that scores all rows, times ``verification_reward``. (A row naming several
    verifiers can score more; its own ``ScoredCompletion.max_reward`` is exact.)"""
    routed = [p.max_contribution for p in policies.values() if not p.all_rows]
    everywhere = sum(p.max_contribution for p in policies.values() if p.all_rows)
    return verification_reward * (max(routed, default=0.0) + everywhere)
