"""The ``active`` sampler: uniform draws that learn which prompts the policy has already solved."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import attrs

from grpo_run import ConfigIssue, RunConfig, RunError
from grpo_run.plugins.samplers.common import ShuffledEpochs

class AllPromptsRetiredError(RunError):
    """Every prompt has been retired: the active sampler has nothing left to draw."""


@attrs.frozen
class ActiveSamplerConfig:
    """Options of the ``active`` sampler."""

    no_resampling_pass_rate: float | None = attrs.field(
        default=1.0,
        validator=attrs.validators.optional([attrs.validators.gt(0.0), attrs.validators.le(1.0)]),
    )
    """A prompt whose latest group's pass rate (the fraction of its samples that solved it: the
    task's correctness verifiers said right, ``scoring.correctness_verifiers``) is at least this,
    in ``(0, 1]``, is retired for good. The default 1.0 retires only
    prompts that every sample solved (their groups have zero reward spread and teach nothing);
    lower values retire mostly-solved prompts too. ``None`` (from Python) never retires."""
    shuffle: bool = True
    """Reshuffle the rows at the start of every epoch (pass over the data)."""

    def check_run(self, run: RunConfig) -> list[ConfigIssue]:
        """Active sampling replaces groups without a reward spread; the zero-std filter must drop them."""
        if run.algorithm.filter_zero_std_samples:
            return []
        return [
            ConfigIssue(
                "sampler.name",
                'is "active", which needs algorithm.filter_zero_std_samples = true '
                "(it draws more prompts to replace the zero-std groups that filter drops)",
            )
        ]


class ActiveSampler:
    """Draws like ``uniform`` (same order for the same seed), skipping retired prompts.

    Feedback: after scoring each prompt's group, the loop calls
    ``update(row_id, rewards, solved)`` with the row's ``"id"``, the group's rewards and whether
    each sample solved the row; the prompt's pass rate is the fraction solved, and reaching
    ``no_resampling_pass_rate`` retires it.

    ``wants_nonzero_std = True`` asks the loop to keep drawing until the batch holds
    ``num_unique_prompts_rollout`` groups whose rewards are not all equal (active sampling).

    A retired prompt is skipped wherever the epoch order reaches it. When every prompt is
    retired, :meth:`sample` raises :class:`AllPromptsRetiredError`. The state (epoch position,
    retired ids, latest pass rates) is plain data, so a resumed run draws the same prompts.
    """

    name: ClassVar[str] = "active"
    Config: ClassVar[type] = ActiveSamplerConfig
    wants_nonzero_std: ClassVar[bool] = True

    def __init__(self, config: ActiveSamplerConfig, rows: Sequence[Mapping[str, Any]], seed: int) -> None:
        if not rows:
            raise ValueError("the active sampler needs at least one row")
        self.config = config
        self.rows = rows
        self.index_of = self._index_rows(rows)
        self.cursor = ShuffledEpochs(len(rows), seed, config.shuffle)
        self.retired: set[str] = set()
        self.pass_rates: dict[str, float] = {}

    @staticmethod
    def _index_rows(rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
        index: dict[str, int] = {}
        missing, duplicated = [], []
        for i, row in enumerate(rows):
            if "id" not in row:
                missing.append(f"#{i}")
                continue
            row_id = str(row["id"])
            if row_id in index:
                duplicated.append(row_id)
            index[row_id] = i
        problems = []
        if missing:
            problems.append(f"rows without an id: {', '.join(missing[:5])}")
        if duplicated:
            problems.append(f"duplicated ids: {', '.join(sorted(set(duplicated))[:5])}")
        if problems:
            raise ValueError(f"the active sampler tracks prompts by a unique 'id'; {'; '.join(problems)}")
        return index

    @property
    def num_retired(self) -> int:
        """How many prompts are retired."""
        return len(self.retired)

    def sample(self, n: int) -> list[Mapping[str, Any]]:
        """Return the next ``n`` rows that are not retired (a row may repeat once its epoch wraps)."""
        if n > 0 and len(self.retired) == len(self.rows):
            raise AllPromptsRetiredError(
                f"active sampler: all {len(self.rows)} prompts are retired (pass rate >= "
                f"no_resampling_pass_rate = {self.config.no_resampling_pass_rate}); nothing left to train on. "
                "Use a higher sampler.no_resampling_pass_rate (at most 1.0), add prompts, or train for fewer steps."
            )
        out: list[Mapping[str, Any]] = []
        while len(out) < n:
            row = self.rows[self.cursor.next()]
            if str(row["id"]) not in self.retired:
                out.append(row)
        return out

    def update(self, row_id: str, rewards: Sequence[float], solved: Sequence[bool]) -> None:
        """Record the pass rate of ``row_id``'s latest group and retire the prompt if it reached the threshold."""
        row_id = str(row_id)
        if row_id not in self.index_of:
            raise KeyError(f"active sampler: no prompt with id {row_id!r}")
        if not solved:
            raise ValueError(f"active sampler: empty group for prompt {row_id!r}")
        rate = sum(map(bool, solved)) / len(solved)
        self.pass_rates[row_id] = rate
        threshold = self.config.no_resampling_pass_rate
        if threshold is not None and rate >= threshold:
            self.retired.add(row_id)

    def state_dict(self) -> dict[str, Any]:
        return {
            **self.cursor.state_dict(),
            "retired": sorted(self.retired),
            "pass_rates": dict(self.pass_rates),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        unknown = sorted(set(state["retired"]) - set(self.index_of))
        if unknown:
            raise ValueError(f"active sampler state retires prompts not in the data: {', '.join(unknown[:5])}")
        self.cursor.load_state_dict(state)
        self.retired = set(state["retired"])
        self.pass_rates = {str(k): float(v) for k, v in state["pass_rates"].items()}
