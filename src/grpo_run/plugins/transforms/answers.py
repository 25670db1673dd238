"""Ground truths from worked solutions: GSM8K's ``... #### 72`` and MATH's ``\\boxed{...}``.

Both read the row's ``ground_truth`` (the column the source's ``ground_truth_key`` names, mapped
already) and replace it with the final answer; the full solution stays in the row under
``solution`` for verifiers or logs that want it.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import attrs

from grpo_run.plugins.verifiers.math import last_boxed

GSM8K_MARKER = "####"


@attrs.frozen
class AnswerTransformConfig:
    """Options shared by the answer transforms."""

    on_missing: Literal["error", "drop"] = "error"
    """A ground truth without a final answer: ``"error"`` stops loading (naming the row),
    ``"drop"`` leaves the row out."""


class _AnswerTransform:
    Config: ClassVar[type] = AnswerTransformConfig
    what: ClassVar[str]

    def __init__(self, config: AnswerTransformConfig) -> None:
        self.config = config

    def __call__(self, row: dict[str, Any]) -> dict[str, Any] | None:
        solution = row.get("ground_truth")
        answer = self.final_answer(solution) if isinstance(solution, str) else None
        if answer is None:
            if self.config.on_missing == "drop":
                return None
            shown = solution if not isinstance(solution, str) or len(solution) <= 60 else solution[:57] + "..."
            raise ValueError(f"ground truth {shown!r} has no {self.what} (transform {self.name!r})")  # type: ignore[attr-defined]
        row["solution"] = solution
        row["ground_truth"] = answer
        return row

    def final_answer(self, solution: str) -> str | None:
        raise NotImplementedError


class Gsm8kAnswer(_AnswerTransform):
    """GSM8K: the text after the last ``####`` (thousands separators removed: ``1,200`` -> ``1200``)."""

    name: ClassVar[str] = "gsm8k"
    what: ClassVar[str] = "'#### <answer>' line"

    def final_answer(self, solution: str) -> str | None:
        head, marker, answer = solution.rpartition(GSM8K_MARKER)
        answer = answer.strip().replace(",", "")
        return answer if marker and answer else None


class BoxedAnswer(_AnswerTransform):
    """MATH and its kin: the content of the last ``\\boxed{...}`` (or ``\\fbox{...}``), braces balanced."""

    name: ClassVar[str] = "boxed"
    what: ClassVar[str] = "closed \\boxed{...}"

    def final_answer(self, solution: str) -> str | None:
        boxed = last_boxed(solution)
        if boxed is None:
            return None
        inner = boxed[len("\\boxed{") : -1].strip()
        return inner or None
