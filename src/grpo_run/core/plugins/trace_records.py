"""One completion as the rollout traces record it (``rollouts/*.jsonl``) and as trackers that
show sample tables receive it (:class:`~grpo_run.LogsCompletions`). Kept free of torch so that
``import grpo_run`` stays light."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import attrs


@attrs.frozen
class CompletionTrace:
    """A completion, what it scored and what the learner made of it.

    One JSON object per line of ``rollouts/step_<n>.jsonl`` (``kind = "train"``) and
    ``rollouts/eval_<n>.jsonl`` (``kind = "eval"``), with these keys.
    """

    kind: Literal["train", "eval"]
    step: int
    """The learner step that trained on it (train), or after which it was evaluated (eval)."""
    row_id: str
    group: int
    """Index of its prompt in the batch (train) or in the eval set (eval)."""
    sample: int
    """Index of the completion within its prompt's group."""
    prompt: str
    """The prompt as the model saw it (decoded prompt tokens, chat template included)."""
    completion: str
    ground_truth: Any
    reward: float
    max_reward: float
    """The most this row can score."""
    solved: bool
    """The task's correctness verifiers said right (``scoring.correctness_verifiers``)."""
    scores: Mapping[str, float]
    """Each applicable verifier's unweighted score."""
    finish_reason: str
    num_tokens: int
    policy_version: int
    """The learner step whose weights generated it."""
    advantage: float | None = None
    """Its group-normalised advantage (train only)."""
    filtered: bool = False
    """Its group was dropped for zero reward spread, so it was not trained on (train only)."""
    greedy: bool = False
    """The greedy completion (eval); otherwise one of the ``eval.num_samples`` sampled ones."""
    turns: tuple[Mapping[str, Any], ...] | None = None
    """An episode's ids after its prompt, as spans ``{"segment", "role", "trained", "text"}``:
    ``role`` ``"assistant"`` (sampled) or ``"environment"`` (bridge ids), ``trained`` whether the
    span counts in the loss. ``None`` for a single-turn completion."""

    def to_json(self) -> dict[str, Any]:
        """The record as JSON-ready data (ground truths that JSON cannot hold become strings)."""
        record = attrs.asdict(self, recurse=False)
        record["scores"] = dict(self.scores)
        record["ground_truth"] = _jsonable(self.ground_truth)
        if self.turns is None:
            del record["turns"]
        else:
            record["turns"] = [dict(t) for t in self.turns]
        return record


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return str(value)
