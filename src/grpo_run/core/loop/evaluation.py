"""Greedy evaluation on held-out prompts."""

from __future__ import annotations

from collections.abc import Sequence

from grpo_run.core.data.prompts import PromptRow
from grpo_run.core.plugins.contracts import GenerationEngine
from grpo_run.core.plugins.types import SamplingParams, is_solved
from grpo_run.core.scoring.scorer import RewardScorer


class Evaluator:
    """Greedy completions for every eval prompt, scored by the run's verifiers.

    ``eval/accuracy`` is the fraction of prompts a completion solved (:func:`grpo_run.is_solved`:
    its reward reached the most the row can score).
    """

    def __init__(
        self,
        engine: GenerationEngine,
        scorer: RewardScorer,
        rows: Sequence[PromptRow],
        max_new_tokens: int,
        stop_strings: Sequence[str] = (),
    ) -> None:
        self.engine = engine
        self.scorer = scorer
        self.rows = list(rows)
        self.params = SamplingParams(n=1, max_new_tokens=max_new_tokens, greedy=True, stop_strings=tuple(stop_strings))

    async def evaluate(self, step: int) -> dict[str, float]:
        """Metrics under ``eval/`` for the engine's current weights (``step`` is for the caller's records)."""
        rows = self.rows
        generated = await self.engine.generate([list(r.token_ids) for r in rows], self.params)
        completions = [group[0] for group in generated]
        scored = await self.scorer.score(
            rows, [c.text for c in completions], finish_reasons=[c.finish_reason for c in completions],
            num_tokens=[len(c.token_ids) for c in completions],
        )
        n = max(1, len(rows))
        return {
            "eval/accuracy": sum(is_solved(s.reward, s.max_reward) for s in scored) / n,
            "eval/reward_mean": sum(s.reward for s in scored) / n,
            "eval/response_length_mean": sum(len(c.token_ids) for c in completions) / n,
            "eval/stop_rate": sum(c.finish_reason == "stop" for c in completions) / n,
            "eval/num_prompts": float(len(rows)),
        }
