"""Runs multi-turn episodes: the environment's messages, the renderer's ids, the engine's turns.

Token-in/token-out: a segment's ids are its rendered prompt, then exactly the sampled ids of each
turn and, between turns, the ids the renderer's ``bridge`` gives for the environment's messages
(masked: the engine did not sample them, so their log-probs are NaN). When a bridge is
impossible the conversation is rendered afresh as a new segment's prompt.

Budgets: ``max_turns``; ``max_tokens_per_turn`` new tokens per turn; all sampled and bridge ids
of an episode within ``rollout.response_length``; environment messages cut at
``max_tool_output_chars``. A turn cut by a budget ends the episode, and its tool calls never
run. Synchronous environment code runs on a :class:`DaemonThreadPool`, every call under
``step_timeout_s`` and the whole episode under ``episode_timeout_s``; an error or overrun raises
:class:`EpisodeFailed` (the producer drops the group and counts it).

An environment with ``run_episode`` (:class:`~grpo_run.DrivenEnvironment`) drives its own
conversation instead: it gets a :class:`~grpo_run.core.rollout.chat_session.ChatSession`, which
records the episode under the same rules, and its episode is timed, failed and counted the same way.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from grpo_run.core.config.environment import EnvironmentSlot
from grpo_run.core.plugins.abilities import DrivenEnvironment
from grpo_run.core.plugins.contracts import Environment, GenerationEngine, Renderer
from grpo_run.core.plugins.episodes import Action, EnvReset, EnvStep, EpisodeResult, ToolSchema
from grpo_run.core.plugins.types import SamplingParams
from grpo_run.core.rollout.chat_session import ChatSession
from grpo_run.core.rollout.env_processes import EnvironmentProcesses, EpisodeOwner
from grpo_run.core.rollout.env_threads import DaemonThreadPool
from grpo_run.core.rollout.episodes import Episode, OpenSegment as _Open, Segment, combine_rewards
from grpo_run.core.rollout.turn_batcher import TurnBatcher
from grpo_run.core.scoring.loop_watchdog import StepMonitor, Tracked

_EPISODE: contextvars.ContextVar[EpisodeOwner | None] = contextvars.ContextVar("grpo_run_episode", default=None)
"""The episode whose environment calls run in this context: the owner of the processes they start."""


class EpisodeFailed(Exception):
    """An episode could not finish (the environment raised, overran or returned garbage)."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


class EpisodeRunner:
    """Drives episodes of one environment through the engine."""

    def __init__(
        self,
        env: Environment | DrivenEnvironment,
        renderer: Renderer,
        engine: GenerationEngine,
        settings: EnvironmentSlot,
        params: SamplingParams,
        *,
        pool: DaemonThreadPool | None = None,
        processes: EnvironmentProcesses | None = None,
    ) -> None:
        self.env = env
        self.renderer = renderer
        self.engine = engine
        self.settings = settings
        self.params = params
        """Sampling of a turn; ``max_new_tokens`` is the episode's total budget."""
        self.pool = pool if pool is not None else DaemonThreadPool(settings.workers)
        self.batcher = TurnBatcher(engine)
        self._monitor = StepMonitor()
        self.processes = processes if processes is not None else EnvironmentProcesses(getattr(env, "name", "?"))
        """The processes environment code starts: an episode's end when it is over, the rest at :meth:`close`."""

    def close(self) -> None:
        self.pool.close()
        self.processes.close()

    async def run_many(self, rows: Sequence[Mapping[str, Any]], seeds: Sequence[int], params: SamplingParams
                       ) -> list[Episode | EpisodeFailed]:
        """One episode per row (``params.n`` is ignored), all in the same turn batches; a failed
        episode is returned as its :class:`EpisodeFailed`."""
        for _ in rows:
            self.batcher.enter()

        async def one(row: Mapping[str, Any], seed: int) -> Episode | EpisodeFailed:
            try:
                return await self.run(row, seed, 0, reserved=True, params=params)
            except EpisodeFailed as exc:
                return exc

        return list(await asyncio.gather(*(one(r, s) for r, s in zip(rows, seeds))))

    async def run(self, row: Mapping[str, Any], seed: int, sample: int, *, reserved: bool = False,
                  params: SamplingParams | None = None) -> Episode:
        """Episode ``sample`` of the group whose row and initial-state ``seed`` are given.

        ``reserved``: the caller already counted it in ``self.batcher`` (``enter``), as a producer
        does for a whole batch before starting any episode, so that no turn batch is sent before
        every episode of the batch has asked for its turn. ``params``: sampling other than the
        run's (evaluation: greedy), ``max_new_tokens`` again the episode's total budget."""
        if not reserved:
            self.batcher.enter()
        owner = EpisodeOwner()
        token = _EPISODE.set(owner)
        try:
            episode = self._episode(row, seed, sample, params or self.params)
            return await asyncio.wait_for(episode, self.settings.episode_timeout_s)
        except asyncio.TimeoutError:
            raise EpisodeFailed(f"the episode ran longer than environment.episode_timeout_s = "
                                f"{self.settings.episode_timeout_s:g}", timed_out=True) from None
        finally:
            self.batcher.leave()
            _EPISODE.reset(token)
            self.processes.end(owner)  # the episode is over (closed): what it started goes too

    # -- one episode -------------------------------------------------------------------------

    async def _episode(self, row: Mapping[str, Any], seed: int, sample: int, params: SamplingParams) -> Episode:
        if isinstance(self.env, DrivenEnvironment):
            return await self._driven(row, seed, sample, params)
        reset = await self._call("reset", self.env.reset, row, seed)
        if not isinstance(reset, EnvReset):
            raise EpisodeFailed(f"reset returned {type(reset).__name__}, not an EnvReset")
        state = reset.state
        try:
            return await self._turns(reset, state, seed, sample, params)
        finally:
            closer = getattr(self.env, "close", None)
            if callable(closer):
                try:
                    await self._call("close", closer, state)
                except EpisodeFailed:
                    pass  # the episode's outcome stands; a failing close is the environment's problem

    async def _turns(self, reset: EnvReset, state: Any, seed: int, sample: int, sampling: SamplingParams) -> Episode:
        s = self.settings
        tools: Sequence[ToolSchema] = list(reset.tools)
        messages = [dict(m) for m in reset.messages]
        prompt = self.renderer.render(messages, tools)
        prompt_cap = len(prompt) + sampling.max_new_tokens
        budget = sampling.max_new_tokens
        per_turn = s.max_tokens_per_turn or budget
        eot = list(self.renderer.end_of_turn_ids())
        segments: list[Segment] = []
        seg = _Open(list(prompt))
        used = 0
        rewards: list[float] = []
        versions: list[tuple[int, int]] = []
        metrics = {"tool_calls": 0.0, "parse_errors": 0.0, "bridge_fallbacks": 0.0, "env_tokens": 0.0,
                   "env_s": 0.0, "generation_s": 0.0}
        text, finish = "", "stop"
        turn = 0
        for turn in range(s.max_turns):
            room = min(per_turn, budget - used)
            if room <= 0:
                finish = "length"
                break
            params = attrs.evolve(sampling, n=1, max_new_tokens=room)
            started = time.perf_counter()
            comp = await self.batcher.generate((seed, sample, turn), seg.prompt + seg.ids, params)
            metrics["generation_s"] += time.perf_counter() - started
            seg.add(comp.token_ids, comp.logprobs, "assistant", turn)
            used += len(comp.token_ids)
            versions.append(comp.policy_versions)
            parsed = self.renderer.parse(comp.token_ids)
            messages.append(parsed.message())
            text = parsed.text
            metrics["tool_calls"] += len(parsed.tool_calls)
            metrics["parse_errors"] += parsed.parse_error is not None
            if comp.finish_reason != "stop":  # cut mid-turn: its tool calls never run
                finish = "length"
                break
            started = time.perf_counter()
            step = await self._call("step", self.env.step, state, Action(parsed, "stop", turn))
            metrics["env_s"] += time.perf_counter() - started
            if not isinstance(step, EnvStep) or not math.isfinite(float(step.reward)):
                raise EpisodeFailed(f"step returned {step!r:.200}, not an EnvStep with a finite reward")
            rewards.append(float(step.reward))
            for key, value in step.metrics.items():
                metrics[f"env/{key}"] = metrics.get(f"env/{key}", 0.0) + float(value)
            if step.state is not None:
                state = step.state
            if step.done or turn == s.max_turns - 1:
                break
            new = [self._cut(m) for m in step.messages]
            closing = [] if comp.token_ids[-len(eot):] == tuple(eot) else eot
            bridge = self.renderer.bridge(messages, new, tools) if not closing else None
            messages.extend(new)
            if bridge is None:  # not provably prefix-preserving: a fresh render, a new segment
                metrics["bridge_fallbacks"] += 1
                segments.append(seg.close())
                seg = _Open(self.renderer.render(messages, tools))
                if len(seg.prompt) >= prompt_cap:
                    finish = "length"
                    seg = None  # type: ignore[assignment]
                    break
                budget = min(budget, used + prompt_cap - len(seg.prompt))
                continue
            if used + len(bridge) >= budget:  # the environment's answer does not fit: the episode ends
                finish = "length"
                break
            seg.add(bridge, None, "environment", turn)
            used += len(bridge)
            metrics["env_tokens"] += len(bridge)
        if seg is not None and seg.ids:
            segments.append(seg.close())
        finisher = getattr(self.env, "finish", None)
        final = 0.0
        if callable(finisher):
            final = await self._call("finish", finisher, state)
            if not isinstance(final, (int, float)) or not math.isfinite(float(final)):
                raise EpisodeFailed(f"finish returned {final!r:.200}, not a finite number")
        metrics["turns"] = float(turn + 1)
        metrics["segments"] = float(len(segments))
        metrics["sampled_tokens"] = float(sum(sum(g.sampled) for g in segments))
        return Episode(
            segments=tuple(segments),
            text=text,
            finish_reason=finish,
            policy_version=min(v[0] for v in versions),
            last_policy_version=max(v[1] for v in versions),
            env_reward=combine_rewards(rewards, s.reward_combination, s.discount) + float(final),
            turns=turn + 1,
            messages=tuple(messages),
            metrics=metrics,
            train_on_env_tokens=s.train_on_env_tokens,
            turn_rewards=tuple(rewards),
            turn_versions=tuple(versions),
        )

    async def _driven(self, row: Mapping[str, Any], seed: int, sample: int, sampling: SamplingParams) -> Episode:
        """An environment that drives its own conversation: ``run_episode`` with a chat session."""
        chat = ChatSession(self.renderer, self.batcher, self.settings, sampling, seed, sample)
        started = time.perf_counter()
        tracked = Tracked(self.env.run_episode(row, seed, chat), "environment run_episode", self._monitor)
        try:
            with self.processes.watching(_EPISODE.get()):
                result = await tracked
        except Exception as exc:
            raise EpisodeFailed(f"environment run_episode raised {type(exc).__name__}: {exc}") from exc
        limit = self.settings.step_timeout_s
        if tracked.blocked_s > limit:
            raise EpisodeFailed(
                f"environment run_episode held the event loop for {tracked.blocked_s:.1f} s without awaiting "
                f"(more than environment.step_timeout_s = {limit:g}; a blocking call in async def)", timed_out=True)
        if isinstance(result, (int, float)) and not isinstance(result, bool):
            result = EpisodeResult(float(result))
        if not isinstance(result, EpisodeResult) or not math.isfinite(float(result.reward)):
            raise EpisodeFailed(f"run_episode returned {result!r:.200}, not an EpisodeResult with a finite reward")
        segments = chat.finished_segments()
        if not segments:
            raise EpisodeFailed("run_episode sampled no turn (chat.complete was never called): nothing to train on")
        metrics = dict(chat.metrics)
        metrics["env_s"] = time.perf_counter() - started - metrics["generation_s"]
        for key, value in result.metrics.items():
            metrics[f"env/{key}"] = float(value)
        metrics.update(turns=float(chat.calls), segments=float(len(segments)),
                       sampled_tokens=float(sum(sum(g.sampled) for g in segments)))
        return Episode(
            segments=tuple(segments),
            text=chat.last_text if result.text is None else result.text,
            finish_reason="length" if chat.cut else "stop",
            policy_version=min(v[0] for v in chat.versions),
            last_policy_version=max(v[1] for v in chat.versions),
            env_reward=float(result.reward),
            turns=chat.calls,
            messages=tuple(chat.messages),
            metrics=metrics,
            train_on_env_tokens=self.settings.train_on_env_tokens,
            turn_versions=tuple(chat.versions),
        )

    def _cut(self, message: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(message, Mapping) or not isinstance(message.get("content"), str):
            raise EpisodeFailed(f"the environment returned {message!r:.200}, not a message with text content")
        out = dict(message)
        limit = self.settings.max_tool_output_chars
        if len(out["content"]) > limit:
            out["content"] = out["content"][:limit] + f"... [cut at {limit} characters]"
        return out

    async def _call(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``: awaited when it is a coroutine function, else on the thread pool; under
        ``step_timeout_s``. Every failure is an :class:`EpisodeFailed` naming the call."""
        limit = self.settings.step_timeout_s
        owner = _EPISODE.get()
        try:
            if not inspect.iscoroutinefunction(fn):
                return await self.pool.run(self.processes.on_thread(owner, fn), *args, timeout=limit)
            tracked = Tracked(fn(*args), f"environment {what}", self._monitor)
            with self.processes.watching(owner):
                result = await asyncio.wait_for(tracked, limit)
            if tracked.blocked_s > limit:  # a blocking call inside async def: no timeout could fire
                raise EpisodeFailed(
                    f"environment {what} held the event loop for {tracked.blocked_s:.1f} s without awaiting "
                    f"(a blocking call in async def; make it a plain def, which runs on a thread)", timed_out=True)
            return result
        except asyncio.TimeoutError:
            raise EpisodeFailed(f"environment {what} ran longer than environment.step_timeout_s = {limit:g}",
                                timed_out=True) from None
        except EpisodeFailed:
            raise
        except Exception as exc:
            raise EpisodeFailed(f"environment {what} raised {type(exc).__name__}: {exc}") from exc
