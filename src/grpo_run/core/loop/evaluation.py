"""Evaluation on held-out prompts: greedy accuracy and pass@k from sampled completions."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from grpo_run.core.data.prompts import PromptRow
from grpo_run.core.loop.traces import TraceWriter, episode_spans
from grpo_run.core.plugins.contracts import GenerationEngine
from grpo_run.core.plugins.trace_records import CompletionTrace
from grpo_run.core.plugins.types import Completion, SamplingParams
from grpo_run.core.rollout.episode_producer import episode_metrics
from grpo_run.core.rollout.episode_runner import EpisodeFailed, EpisodeRunner
from grpo_run.core.rollout.episodes import Episode, derive_seed, episode_solved, failed_episode, success_bar
from grpo_run.core.rollout.seeds import eval_seed
from grpo_run.core.runlog import get_logger
from grpo_run.core.scoring.results import ScoredCompletion
from grpo_run.core.scoring.scorer import RewardScorer, ScoredBatch


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimator of Chen et al. 2021 ("Evaluating Large Language Models
    Trained on Code", eq. 1) for one problem: ``1 - C(n - c, k) / C(n, k)`` with ``n`` samples of
    which ``c`` are correct, computed as a product so that large ``n`` do not overflow."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


class Evaluator:
    """Greedy completions for every eval prompt (and ``num_samples`` sampled ones for pass@k),
    scored by the run's verifiers.

    ``eval/accuracy`` is the fraction of prompts whose greedy completion solved it (the task's
    correctness verifiers said right, :mod:`~grpo_run.core.scoring.correctness`). With
    ``num_samples = n > 0``, ``eval/pass@k`` for k = 1..n is the mean over prompts of
    :func:`pass_at_k` of the prompt's ``n`` samples at ``temperature``. Each evaluation's
    completions go to ``rollouts/eval_<step>.jsonl`` when ``traces`` is enabled.
    """

    def __init__(
        self,
        engine: GenerationEngine,
        scorer: RewardScorer,
        rows: Sequence[PromptRow],
        max_new_tokens: int,
        stop_strings: Sequence[str] = (),
        *,
        num_samples: int = 0,
        temperature: float = 1.0,
        traces: TraceWriter | None = None,
        seed: int | None = None,
        episodes: EpisodeRunner | None = None,
    ) -> None:
        self.engine = engine
        self.scorer = scorer
        self.rows = list(rows)
        self.params = SamplingParams(n=1, max_new_tokens=max_new_tokens, greedy=True, stop_strings=tuple(stop_strings))
        self.sampled_params = SamplingParams(n=num_samples, max_new_tokens=max_new_tokens,
                                             temperature=temperature, stop_strings=tuple(stop_strings))
        self.num_samples = num_samples
        self.traces = traces
        self.seed = seed
        """The run's seed: the sampled evaluation after step ``k`` is seeded from it and ``k``."""
        self.episodes = episodes
        """With an ``[environment]``: the greedy completion of a row is a greedy episode, scored on
        its last turn by the verifiers; it is solved as ``environment.success_threshold`` says
        (:func:`~grpo_run.core.rollout.episodes.episode_solved`). pass@k stays single-turn."""
        self.warn: Callable[[str], None] | None = None
        """Shows :attr:`all_failed` on the console (the log has it anyway)."""
        self.all_failed: str | None = None
        """Set when every greedy episode of the last evaluation failed: what happened (then no
        ``eval/accuracy`` is reported: there was nothing to judge)."""

    async def evaluate(self, step: int) -> dict[str, float]:
        """Metrics under ``eval/`` for the engine's current weights; ``step`` names the trace file."""
        rows = self.rows
        greedy, failures = await self._greedy(rows)
        scored = await self._score(rows, greedy)
        n = max(1, len(rows))
        solved = [self._solved(s, c) for s, c in zip(scored, greedy)]
        metrics = {
            "eval/accuracy": sum(solved) / n,
            "eval/reward_mean": sum(s.reward + getattr(c, "env_reward", 0.0) for s, c in zip(scored, greedy)) / n,
            "eval/response_length_mean": sum(len(c.token_ids) for c in greedy) / n,
            "eval/stop_rate": sum(c.finish_reason == "stop" for c in greedy) / n,
            "eval/num_prompts": float(len(rows)),
        }
        self.all_failed = None
        if self.episodes is not None:  # the environment's rewards and metrics of the greedy episodes
            metrics["eval/env_reward_mean"] = sum(c.env_reward for c in greedy) / n
            stats = [{"failed": float(f is not None), "timed_out": float(f is not None and f.timed_out), **c.metrics}
                     for c, f in zip(greedy, failures)]
            metrics.update({f"eval/{k}": v for k, v in episode_metrics(stats).items()})
            if rows and all(f is not None for f in failures):
                self._report_all_failed(step, rows, failures, metrics)
        traces = self._traces(step, rows, [[c] for c in greedy], scored, greedy=True, solved=solved)
        if self.num_samples:
            params = self.sampled_params
            if self.seed is not None:
                params = attrs.evolve(params, seed=eval_seed(self.seed, step))
            groups = await self.engine.generate([list(r.token_ids) for r in rows], params)
            flat_rows = [r for r, g in zip(rows, groups) for _ in g]
            sampled = await self._score(flat_rows, [c for g in groups for c in g])
            metrics.update(self._pass_at_k(groups, sampled))
            traces += self._traces(step, rows, groups, sampled, greedy=False)
        if self.traces is not None and self.traces.enabled:
            self.traces.write("eval", step, traces)
        return metrics

    async def _greedy(self, rows: Sequence[PromptRow]) -> tuple[list[Any], list[EpisodeFailed | None]]:
        """The greedy completion (or episode) of each row, and each episode's failure."""
        if self.episodes is None:
            groups = await self.engine.generate([list(r.token_ids) for r in rows], self.params)
            return [group[0] for group in groups], [None] * len(groups)
        seeds = [derive_seed("eval", r.get("id", i)) for i, r in enumerate(rows)]
        results = await self.episodes.run_many(rows, seeds, self.params)
        failures = [r if isinstance(r, EpisodeFailed) else None for r in results]
        if any(failures):
            first = next(i for i, f in enumerate(failures) if f is not None)
            get_logger().warning("eval_episodes_failed", failed=sum(f is not None for f in failures),
                                 episodes=len(results), row=rows[first].get("id"), error=str(failures[first]))
        return [r if isinstance(r, Episode) else failed_episode() for r in results], failures

    def _report_all_failed(self, step: int, rows: Sequence[PromptRow], failures: Sequence[EpisodeFailed | None],
                           metrics: dict[str, float]) -> None:
        """Every greedy episode failed: no accuracy (0 would read as a model that learnt nothing); say so."""
        assert self.episodes is not None
        for key in ("eval/accuracy", "eval/reward_mean", "eval/response_length_mean", "eval/stop_rate",
                    "eval/env_reward_mean"):
            metrics.pop(key, None)
        when = "before training" if step == 0 else f"after step {step}"
        self.all_failed = (
            f"the evaluation {when}: all {len(rows)} greedy episodes failed, so there is no eval/accuracy: "
            f"environment {self.episodes.name!r} failed (first failure, row {rows[0].get('id')!r}): {failures[0]}. "
            f"Fix the environment or its limits (log.jsonl has the failures)")
        get_logger().info("evaluation_failed", message=self.all_failed)  # the console (or the error) says it
        if self.warn is not None:
            self.warn(self.all_failed)

    def _solved(self, scored: ScoredCompletion, completion: Any) -> bool:
        if not isinstance(completion, Episode) or self.episodes is None:
            return scored.solved
        threshold = self.episodes.settings.success_threshold
        return episode_solved(scored.solved, scored.reward, scored.max_reward, completion.env_reward, threshold)

    async def _score(self, rows: Sequence[PromptRow], completions: Sequence[Completion]) -> ScoredBatch:
        return await self.scorer.score(
            rows, [c.text for c in completions], finish_reasons=[c.finish_reason for c in completions],
            num_tokens=[len(c.token_ids) for c in completions], training=False,
        )

    def _pass_at_k(self, groups: Sequence[Sequence[Completion]], scored: ScoredBatch) -> dict[str, float]:
        solved = [s.solved for s in scored]
        counts, start = [], 0
        for group in groups:  # per prompt: (samples, correct)
            counts.append((len(group), sum(solved[start:start + len(group)])))
            start += len(group)
        prompts = max(1, len(counts))
        metrics = {
            f"eval/pass@{k}": sum(pass_at_k(n, c, k) for n, c in counts) / prompts
            for k in range(1, self.num_samples + 1)
        }
        metrics["eval/sampled_reward_mean"] = sum(s.reward for s in scored) / max(1, len(scored))
        return metrics

    def _traces(self, step: int, rows: Sequence[PromptRow], groups: Sequence[Sequence[Completion]],
                scored: ScoredBatch, *, greedy: bool, solved: Sequence[bool] | None = None) -> list[CompletionTrace]:
        """Trace records; an episode's reward is its whole reward (the verifiers' plus the
        environment's, as training's traces record it) and ``max_reward`` the bar that solves it."""
        if self.traces is None or not self.traces.enabled:
            return []
        out, flat = [], 0
        for gi, (row, group) in enumerate(zip(rows, groups)):
            prompt = self.traces.decode(row.token_ids)
            for ci, comp in enumerate(group):
                s = scored[flat]
                reward, max_reward = s.reward, s.max_reward
                if isinstance(comp, Episode):
                    reward += comp.env_reward
                    threshold = self.episodes.settings.success_threshold if self.episodes is not None else None
                    max_reward = success_bar(s.max_reward, threshold) or s.max_reward
                ok = solved[flat] if solved is not None else s.solved
                flat += 1
                out.append(CompletionTrace(
                    kind="eval", step=step, row_id=str(row.get("id", "")), group=gi, sample=ci, prompt=prompt,
                    completion=comp.text, ground_truth=row.get("ground_truth"), reward=reward,
                    max_reward=max_reward, solved=ok, scores=dict(s.scores),
                    finish_reason=comp.finish_reason, num_tokens=len(comp.token_ids),
                    policy_version=comp.policy_version, greedy=greedy,
                    turns=episode_spans(comp, self.traces.decode) if isinstance(comp, Episode) else None,
                ))
        return out
