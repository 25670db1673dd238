"""What "solved" means: the task's correctness verifiers said right, whatever else rewarded the row.

A row's reward may add shaping (a format reward, a length penalty, a reward model scoring every
row) to the verdict of the verifier that checks the answer. "Solved" -- ``eval/accuracy``,
``reward/solve_rate``, the ``active`` sampler's pass rate, ``train.stop_at_eval_accuracy`` --
asks only the correctness verifiers, chosen by ``scoring.correctness_verifiers``:

* ``"auto"`` (the default): the verifiers a row names (every enabled verifier but those that
  score every row, ``all_rows``). A completion is solved when each of them that applied reached
  the top of its score range; a row that names none (only ``all_rows`` verifiers score it, as with
  ``grpo_run.train(reward_funcs=...)``) is solved when its whole reward reaches its maximum.
* ``"reward"``: the whole reward reaches the most the row can score (:func:`grpo_run.is_solved`).
* a list of verifier names: each of those that applied reached its top; a row none of them
  scored is never solved.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import attrs

from grpo_run.core.plugins.types import is_solved, reaches
from grpo_run.core.scoring.policy import VerifierPolicy


@attrs.frozen
class Verdict:
    """One correctness verifier's call on a row: its score, the top of its range, and whether it failed."""

    score: float
    top: float
    failed: bool = False

    @property
    def right(self) -> bool:
        return not self.failed and reaches(self.score, self.top)


class Correctness:
    """Which enabled verifiers decide "solved", and the verdict on one scored row."""

    def __init__(self, policies: Mapping[str, VerifierPolicy], setting: str | Sequence[str] = "auto") -> None:
        if isinstance(setting, str) and setting not in ("auto", "reward"):
            raise ValueError(f"correctness_verifiers must be 'auto', 'reward' or a list of verifier names, got {setting!r}")
        if not isinstance(setting, str):
            unknown = [name for name in setting if name not in policies]
            if unknown:
                raise ValueError(f"correctness_verifiers names verifiers that are not enabled: {', '.join(unknown)}; "
                                 f"enabled: {', '.join(policies)}")
        self.setting = setting if isinstance(setting, str) else tuple(setting)
        if setting == "reward":
            self.judges: frozenset[str] = frozenset()
        elif setting == "auto":
            self.judges = frozenset(name for name, policy in policies.items() if not policy.all_rows)
        else:
            self.judges = frozenset(setting)

    def solved(self, verdicts: Iterable[Verdict], reward: float, max_reward: float) -> bool:
        """The verdict on a row: each of its correctness verifiers that applied (``verdicts``) said
        right; where none applied, its whole reward reached its maximum (not with a list of names)."""
        verdicts = list(verdicts)
        if verdicts:
            return all(v.right for v in verdicts)
        return not isinstance(self.setting, tuple) and is_solved(reward, max_reward)

    def can_solve(self, verifiers: Iterable[str], max_reward: float) -> bool:
        """Whether a row scored by ``verifiers`` (at most ``max_reward`` in all) can ever be solved."""
        if any(name in self.judges for name in verifiers):
            return True  # a score at the top of its range is always possible
        return not isinstance(self.setting, tuple) and max_reward > 0

    def describe(self) -> str:
        """For the log and the console: ``"math"``, ``"the whole reward reaching its maximum"``."""
        if not self.judges:
            return "the whole reward reaching its maximum"
        return ", ".join(sorted(self.judges))
