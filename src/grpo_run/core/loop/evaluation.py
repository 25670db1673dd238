"""Greedy evaluation on held-out prompts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grpo_run.core.plugins.contracts import SamplingParams

if TYPE_CHECKING:
    from grpo_run.core.loop.build import RunParts


async def evaluate(parts: RunParts, step: int) -> dict[str, float]:
    """Greedy completions for every eval prompt, scored by the run's verifiers.

    ``eval/accuracy`` is the fraction of prompts whose reward equals the maximum the row can
    score (the sum of the weights of the verifiers it names).
    """
    rows = parts.prompts.eval
    params = SamplingParams(
        n=1,
        max_new_tokens=parts.cfg.rollout.response_length,
        greedy=True,
        stop_strings=tuple(parts.cfg.rollout.stop_strings),
    )
    prompt_ids = [parts.encoder.encode(r) for r in rows]
    completions = [c[0] for c in await parts.engine.generate(prompt_ids, params)]
    scored = await parts.scorer.score(
        list(rows), [c.text for c in completions], finish_reasons=[c.finish_reason for c in completions],
        num_tokens=[len(c.token_ids) for c in completions],
        record_metrics=False,  # eval scoring must not mix into training steps' metrics
    )
    correct = sum(1 for s in scored if s.max_reward > 0 and s.reward >= s.max_reward - 1e-9)
    n = max(1, len(rows))
    return {
        "eval/accuracy": correct / n,
        "eval/reward_mean": sum(s.reward for s in scored) / n,
        "eval/response_length_mean": sum(len(c.token_ids) for c in completions) / n,
        "eval/stop_rate": sum(c.finish_reason == "stop" for c in completions) / n,
        "eval/num_prompts": float(len(rows)),
    }
