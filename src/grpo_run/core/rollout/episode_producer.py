"""Rollout batches of multi-turn episodes: the producer used when ``[environment]`` is set.

It is a :class:`~grpo_run.core.rollout.producer.RolloutProducer` whose "generation" runs the G
episodes of each row through an :class:`EpisodeRunner`; scoring, refills and reward feedback are
the parent's. The G episodes of a group share the row and one initial-state seed; the seed is
drawn from the run seed and a counter saved in the rollout state, so a resumed run draws the same
episodes. A group with a failed episode is dropped (its other samples would bias the group
statistics) and counted; too many failures stop the run through the scorer's error-rate rule, and
so does a batch whose every episode failed (there is nothing to train on: the environment is
broken, not the reward), with the environment and the first failure named.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from grpo_run.core.errors import RunError
from grpo_run.core.rollout.episode_runner import EpisodeFailed, EpisodeRunner
from grpo_run.core.rollout.episodes import (
    Episode,
    combine_rewards,
    derive_seed,
    episode_solved,
    returns_to_go,
    success_bar,
)
from grpo_run.core.rollout.producer import RolloutProducer
from grpo_run.core.plugins.types import SamplingParams
from grpo_run.core.rollout.sequences import RolloutBatch
from grpo_run.core.scoring.metrics import ErrorRateGuard
from grpo_run.core.scoring.workers import CallOutcome


class EpisodeProducer(RolloutProducer):
    """Makes rollout batches of scored episodes."""

    def __init__(self, *args: Any, runner: EpisodeRunner, run_seed: int, env_name: str,
                 guard: ErrorRateGuard | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.runner = runner
        self.run_seed = run_seed
        self.env_name = env_name
        self.guard = guard
        self.groups_drawn = 0
        self._env_stats: dict[int, list[dict[str, float]]] = {}
        self._first_failure: dict[int, str] = {}

    def rollout_state(self) -> dict[str, Any]:
        state = super().rollout_state()
        state["groups_drawn"] = self.groups_drawn
        return state

    def load_rollout_state(self, state: Mapping[str, Any]) -> None:
        super().load_rollout_state(state)
        self.groups_drawn = int(state.get("groups_drawn", 0))

    def close(self) -> None:
        self.runner.close()

    async def produce(self, index: int) -> RolloutBatch:
        self._env_stats[index] = []
        try:
            batch = await super().produce(index)
        finally:
            stats = self._env_stats.pop(index, [])
            failure = self._first_failure.pop(index, None)
        if stats and failure is not None and all(s["failed"] for s in stats):
            raise RunError(f"step {index}: all {len(stats)} episodes failed, so there is nothing to train on: "
                           f"{failure}. Fix the environment (log.jsonl has every failure)")
        return attrs.evolve(batch, scoring_metrics={**batch.scoring_metrics, **episode_metrics(stats)},
                            failure=failure)

    async def _generate_into(self, arrived: asyncio.Queue, prompt_ids: list[list[int]],
                             rows: Sequence[Mapping[str, Any]], clock: Any, params: SamplingParams) -> None:
        first = self.groups_drawn
        self.groups_drawn += len(rows)
        stats = self._env_stats.setdefault(clock.index, [])
        tasks: list[asyncio.Task] = []
        for _ in range(len(rows) * self.params.n):  # every episode of the batch takes part in the turn batches
            self.runner.batcher.enter()
        try:
            # A group's seed: from the round's sampling seed and the group's place in it (a pure function
            # of what is sampled, docs/reliability.md); without one, from the count of groups drawn.
            seeds = [derive_seed(params.seed, "group", i) if params.seed is not None
                     else derive_seed(self.run_seed, "group", first + i) for i in range(len(rows))]
            tasks = [asyncio.create_task(self._group(i, row, seeds[i], stats, clock.index)) for i, row in enumerate(rows)]
            for done in asyncio.as_completed(tasks):
                i, episodes = await done
                if episodes is not None:
                    arrived.put_nowait((i, episodes))
        finally:
            for task in tasks:
                task.cancel()
            arrived.put_nowait(None)
        if self.guard is not None:
            self.guard.check()

    async def _group(self, i: int, row: Mapping[str, Any], seed: int, stats: list[dict[str, float]], index: int
                     ) -> tuple[int, list[Episode] | None]:
        results = await asyncio.gather(*(self._one(row, seed, g) for g in range(self.params.n)))
        failed = [r for r in results if isinstance(r, EpisodeFailed)]
        for r in results:
            stats.append({"failed": float(isinstance(r, EpisodeFailed)),
                          "timed_out": float(isinstance(r, EpisodeFailed) and r.timed_out),
                          **(r.metrics if isinstance(r, Episode) else {})})
        if failed:
            self.log.warning("episode_failed", row=row.get("id"), error=str(failed[0]), failed=len(failed))
            self._first_failure.setdefault(
                index, f"environment {self.env_name!r} failed (first failure, row {row.get('id')!r}): {failed[0]}")
            return i, None
        return i, [r for r in results if isinstance(r, Episode)]

    async def _one(self, row: Mapping[str, Any], seed: int, sample: int) -> Episode | EpisodeFailed:
        started = time.perf_counter()
        try:
            episode = await self.runner.run(row, seed, sample, reserved=True)
        except EpisodeFailed as exc:
            outcome = CallOutcome(0.0, time.perf_counter() - started, error=str(exc), timed_out=exc.timed_out)
            if self.guard is not None:
                self.guard.add(self.env_name, outcome, row.get("id"))
            return exc
        if self.guard is not None:
            self.guard.add(self.env_name, CallOutcome(0.0, time.perf_counter() - started), row.get("id"))
        return episode

    async def _score_groups(self, rows, prompt_ids, ready):  # type: ignore[no-untyped-def]
        groups, call_stats = await super()._score_groups(rows, prompt_ids, ready)
        settings = self.runner.settings
        out = {}
        for i, group in groups.items():
            episodes: list[Episode] = group.completions  # type: ignore[assignment]
            if settings.advantage_granularity == "turn":  # F = the verifiers' score + finish's reward
                gamma = settings.discount if settings.reward_combination == "discounted" else 1.0
                episodes = [attrs.evolve(e, returns=returns_to_go(
                    e.turn_rewards, r + e.env_reward - combine_rewards(e.turn_rewards, settings.reward_combination, gamma),
                    e.turns, gamma)) for r, e in zip(group.rewards, episodes)]
            bar = success_bar(group.max_reward, settings.success_threshold)  # what solves an episode
            out[i] = attrs.evolve(
                group,
                prompt_ids=list(episodes[0].segments[0].prompt_ids) if episodes[0].segments else group.prompt_ids,
                completions=episodes,
                rewards=[r + e.env_reward for r, e in zip(group.rewards, episodes)],
                max_reward=bar if bar is not None else group.max_reward,
                solved=[episode_solved(s, r, group.max_reward, e.env_reward, settings.success_threshold)
                        for s, r, e in zip(group.solved, group.rewards, episodes)],
            )
        return out, call_stats


def episode_metrics(stats: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Per-batch environment metrics (``env/...``) from each episode's numbers."""
    if not stats:
        return {}
    n = len(stats)
    done = [s for s in stats if not s["failed"]]
    out = {
        "env/episodes": float(n),
        "env/error_rate": sum(s["failed"] for s in stats) / n,
        "env/timeout_rate": sum(s["timed_out"] for s in stats) / n,
    }
    if done:
        total = sum(s.get("sampled_tokens", 0.0) + s.get("env_tokens", 0.0) for s in done)
        out.update({
            "env/turns_mean": sum(s["turns"] for s in done) / len(done),
            "env/tool_calls_mean": sum(s["tool_calls"] for s in done) / len(done),
            "env/parse_error_rate": sum(s["parse_errors"] for s in done) / max(1.0, sum(s["turns"] for s in done)),
            "env/bridge_fallbacks": sum(s["bridge_fallbacks"] for s in done),
            "env/segments_mean": sum(s["segments"] for s in done) / len(done),
            "env/env_token_share": sum(s["env_tokens"] for s in done) / max(1.0, total),
            "env/env_s": sum(s["env_s"] for s in done),
            "env/generation_s": sum(s["generation_s"] for s in done),
        })
        extra = sorted({k for s in done for k in s if k.startswith("env/")})
        out.update({k: sum(s.get(k, 0.0) for s in done) / len(done) for k in extra})
    return out
