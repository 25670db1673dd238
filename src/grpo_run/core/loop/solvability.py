"""The start-up warning of a run in which nothing can ever count as solved."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from grpo_run.core.config.schema import RunConfig
from grpo_run.core.scoring.scorer import RewardScorer


def unsolvable_warnings(cfg: RunConfig, scorer: RewardScorer, train: Sequence[Mapping[str, Any]],
                        eval_rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """A line per row set (eval, train) none of whose rows can ever be solved under
    ``scoring.correctness_verifiers``: its accuracy would read 0 whatever the model learns."""
    if cfg.environment is not None:  # an episode can be solved by the environment's reward
        return []
    by = scorer.correctness.describe()
    setting = cfg.scoring.correctness_verifiers
    shown = setting if isinstance(setting, str) else list(setting)
    fix = (f"scoring.correctness_verifiers = {shown!r} decides what is solved ({by}); "
           "name the verifiers that check the answers")
    out = []
    if eval_rows and not any(scorer.can_solve(row) for row in eval_rows):
        out.append(f"no eval row can ever count as solved, so eval/accuracy stays 0 and "
                   f"train.stop_at_eval_accuracy never fires: {fix}")
    if train and not any(scorer.can_solve(row) for row in train):
        out.append(f"no train row can ever count as solved, so reward/solve_rate stays 0 and the active sampler "
                   f"retires no prompt: {fix}")
    return out
