"""Raw scores turned into scores in the training process (:class:`~grpo_run.RescalesScores`).

A verifier whose config rescales returns raw scores from wherever it runs (a worker process, a
Ray actor); the scorer hands them, call by call and in row order, to the one
:class:`~grpo_run.ScoreRescaler` of that verifier, which lives here and keeps its state (running
statistics) across calls. The rescaled score must lie in the verifier's score range; a rescaler
that raises or breaks its promises fails the calls it was given, like any verifier bug.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from grpo_run.core.errors import PluginError
from grpo_run.core.plugins.abilities import RescalesScores
from grpo_run.core.scoring.policy import VerifierPolicy
from grpo_run.core.scoring.workers import CallOutcome, VerifierCall, VerifierSpecs, describe_exception


class Rescalers:
    """The rescalers of a scorer's verifiers (none for most runs)."""

    def __init__(self, specs: VerifierSpecs, policies: Mapping[str, VerifierPolicy]) -> None:
        self._policies = policies
        self._rescalers: dict[str, Any] = {}
        for name, (_cls, config) in specs.items():
            if isinstance(config, RescalesScores):
                try:
                    self._rescalers[name] = config.rescaler()
                except Exception as exc:  # plugin code: one line naming the verifier
                    raise PluginError(f"verifier {name!r}: its rescaler could not be built: "
                                      f"{describe_exception(exc)}") from None

    def __bool__(self) -> bool:
        return bool(self._rescalers)

    def apply(self, calls: Sequence[VerifierCall], outcomes: list[CallOutcome], training: bool) -> list[CallOutcome]:
        """``outcomes`` with the raw scores of rescaled verifiers replaced by their scores."""
        if not self._rescalers:
            return outcomes
        out = list(outcomes)
        for name, rescaler in self._rescalers.items():
            picked = [i for i, (call, o) in enumerate(zip(calls, out, strict=True))
                      if call.verifier == name and o.error is None and o.applicable]
            if picked:
                for i, outcome in zip(picked, self._rescale(name, rescaler, [out[i] for i in picked], training),
                                      strict=True):
                    out[i] = outcome
        return out

    def _rescale(self, name: str, rescaler: Any, outcomes: list[CallOutcome], training: bool) -> list[CallOutcome]:
        low, high = self._policies[name].score_range
        try:
            scores = list(rescaler.rescale([o.score for o in outcomes], training))
            if len(scores) != len(outcomes):
                raise TypeError(f"rescale returned {len(scores)} scores for {len(outcomes)} raw scores")
        except Exception as exc:  # isolation: a rescaler bug costs these rewards, not the run
            error = f"rescaling: {describe_exception(exc)}"
            return [attrs.evolve(o, score=0.0, error=error) for o in outcomes]
        rescaled = []
        for outcome, score in zip(outcomes, scores, strict=True):
            if isinstance(score, numbers.Real) and not isinstance(score, bool) and math.isfinite(score) and low <= score <= high:
                rescaled.append(attrs.evolve(outcome, score=float(score)))
            else:
                error = f"rescaled score {score!r} is not a finite number in [{low:g}, {high:g}]"
                rescaled.append(attrs.evolve(outcome, score=0.0, error=error))
        return rescaled

    def state_dict(self) -> dict[str, Any]:
        """Each rescaler's state, by verifier name (empty without rescalers)."""
        return {name: rescaler.state_dict() for name, rescaler in self._rescalers.items()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Undo :meth:`state_dict`; a verifier the state does not name keeps a fresh rescaler."""
        for name, rescaler in self._rescalers.items():
            if name in state:
                rescaler.load_state_dict(state[name])
