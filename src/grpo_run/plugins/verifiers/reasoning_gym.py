"""The ``reasoning_gym`` verifier: a reasoning-gym problem's own ``score_answer``.

The ground truth is the entry the ``reasoning_gym`` task generated (``{"task", "entry"}``); the
answer is taken from the completion's last ``<answer>...</answer>`` (``answer_format = "tag"``,
reasoning-gym's convention) or is the whole completion (``"raw"``). A completion without an
answer scores 0. A ``score_answer`` that raises is a failed call (counted and logged by the
scoring runtime, reward 0), never a crash of the run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal

import attrs

from grpo_run import VerifierConfig, VerifierResult


@attrs.frozen
class ReasoningGymVerifierConfig(VerifierConfig):
    """Options of the ``reasoning_gym`` verifier."""

    answer_format: Literal["tag", "raw"] = "tag"
    """``"tag"``: the text inside the last ``<answer>...</answer>``; ``"raw"``: the whole completion."""


class ReasoningGymVerifier:
    """Scores with the generating task's own scorer (see the module docstring)."""

    name: ClassVar[str] = "reasoning_gym"
    Config: ClassVar[type] = ReasoningGymVerifierConfig

    def __init__(self, config: ReasoningGymVerifierConfig | None = None) -> None:
        self.config = config or ReasoningGymVerifierConfig()
        self._scorers: dict[str, Callable[..., float]] = {}
        # Import now, while the worker starts (it has minutes for that), not in the first call,
        # which has only the per-call time limit: reasoning_gym takes seconds to import.
        import reasoning_gym.utils  # noqa: F401

    def score(self, completion: str, ground_truth: Any, row: Mapping[str, Any]) -> VerifierResult:
        if not (isinstance(ground_truth, Mapping) and "task" in ground_truth and "entry" in ground_truth):
            raise ValueError("ground_truth must be {'task': <reasoning-gym task>, 'entry': <its entry>} "
                             "(rows of the reasoning_gym task)")
        answer = self._answer(completion)
        if answer is None:
            return VerifierResult(0.0, metrics={"answer_found": 0.0})
        score = self._scorer(ground_truth["task"])(answer=answer, entry=ground_truth["entry"])
        return VerifierResult(float(score), metrics={"answer_found": 1.0})

    def _answer(self, completion: str) -> str | None:
        if self.config.answer_format == "raw":
            return completion.strip()
        from reasoning_gym.utils import extract_answer

        return extract_answer(completion, tag_name="answer")

    def _scorer(self, task: str) -> Callable[..., float]:
        if task not in self._scorers:
            import reasoning_gym

            self._scorers[task] = reasoning_gym.get_score_answer_fn(task)
        return self._scorers[task]
