"""Runs multi-turn episodes: the environment's messages, the renderer's ids, the engine's turns.

Token-in/token-out: a segment's ids are its rendered prompt, then exactly the sampled ids of each
turn and, between turns, the ids the renderer's ``bridge`` gives for the environment's messages
(masked: the engine did not sample them, so their log-probs are NaN). When a bridge is
impossible the conversation is rendered afresh as a new segment's prompt.

Budgets: ``max_turns``; ``max_tokens_per_turn`` new tokens per turn; all sampled and bridge ids
of an episode within ``rollout.response_length``; step messages cut at ``max_tool_output_chars``,
opening messages at ``max_opening_chars``, and the rendered opening plus the budget within
``context_tokens`` (the learner's ``pack_length`` and the model's context). A turn cut by a budget
ends the episode, and its tool calls never run. Synchronous environment code runs on a
:class:`DaemonThreadPool`, every call under ``step_timeout_s``, and the environment's own time in
the whole episode under ``episode_timeout_s`` (:mod:`.episode_clock`: waiting for generation or a
thread does not count); what it returns is checked there too (:mod:`.env_returns`). An error (an
exception, ``SystemExit`` and ``KeyboardInterrupt`` included: a real Ctrl-C is a signal the run
handles, never raised in environment code), a value outside the contract or an overrun raises
:class:`EpisodeFailed` (the producer drops the group and counts it).

An environment with ``run_episode`` (:class:`~grpo_run.DrivenEnvironment`) drives its own
conversation instead: it gets a :class:`~grpo_run.core.rollout.chat_session.ChatSession`, which
records the episode under the same rules, and its episode is timed, failed and counted the same way.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from grpo_run.core.config.environment import TIMING_FLOOR_S, EnvironmentSlot
from grpo_run.core.errors import RunError
from grpo_run.core.plugins.abilities import DrivenEnvironment
from grpo_run.core.plugins.contracts import Environment, GenerationEngine, Renderer
from grpo_run.core.plugins.episodes import Action, ToolSchema
from grpo_run.core.plugins.types import SamplingParams
from grpo_run.core.rollout import env_exit, env_returns
from grpo_run.core.rollout.chat_session import ChatSession, PromptLimit
from grpo_run.core.rollout.driven_clock import DrivenClock
from grpo_run.core.rollout.env_calls import (
    BLOCKED_REPEAT_S, BLOCKED_WARN_S, EXITS, HANG_GRACE_S, CallsInFlight, CallTiming, EpisodeFailed,
    checked as _checked, describe_blocking as _describe_blocking, no_exit as _no_exit, same as _same,
)
from grpo_run.core.rollout.env_processes import EnvironmentProcesses, EpisodeOwner
from grpo_run.core.rollout.env_threads import CallTimedOut, DaemonThreadPool, TooManyHungCalls
from grpo_run.core.rollout.episode_clock import EpisodeClock
from grpo_run.core.rollout.episodes import Episode, OpenSegment as _Open, Segment, combine_rewards
from grpo_run.core.rollout.loop_lag import LoopLags
from grpo_run.core.rollout.turn_batcher import TurnBatcher
from grpo_run.core.runlog import get_logger
from grpo_run.core.scoring.loop_watchdog import LoopWatchdog, StepMonitor, Tracked

_EPISODE: contextvars.ContextVar[EpisodeOwner | None] = contextvars.ContextVar("grpo_run_episode", default=None)
"""The episode whose environment calls run in this context: the owner of the processes they start."""
_CLOCK: contextvars.ContextVar[EpisodeClock | DrivenClock | None] = contextvars.ContextVar("grpo_run_episode_clock",
                                                                                         default=None)
"""The clock of the episode that runs in this context (its waits for a thread stop it)."""


def measurable_note(limit_s: float) -> str:
    """What to add to an overrun's message when the limit is below what can be measured."""
    if limit_s >= TIMING_FLOOR_S:
        return ""
    return (f"; a limit below {TIMING_FLOOR_S:g} s is below what can be measured: a loaded machine's thread "
            f"scheduling adds that much to a call that returns at once")


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
        prompt_limit: PromptLimit | None = None,
        context_tokens: int | None = None,
        processes: EnvironmentProcesses | None = None,
    ) -> None:
        """``context_tokens``: the most ids one segment may hold (prompt and completion): the
        learner's ``algorithm.pack_length`` and the model's context; None: unchecked."""
        self.env = env
        self.renderer = renderer
        self.engine = engine
        self.settings = settings
        self.params = params
        """Sampling of a turn; ``max_new_tokens`` is the episode's total budget."""
        self.pool = pool if pool is not None else DaemonThreadPool(
            settings.workers, hang_grace_s=max(settings.step_timeout_s, HANG_GRACE_S))
        self.batcher = TurnBatcher(engine)
        self.prompt_limit = prompt_limit
        """The longest first prompt of a driven episode (``None``: no limit)."""
        self.context_tokens = context_tokens
        self.monitor = StepMonitor()
        """Which environment call holds the event loop, if one does (read by the loop watchdog
        and by the stop-signal handling)."""
        self.warning_sink: Callable[[str], None] | None = None
        """Also shows the watchdog's warnings (the run points it at the console); always logged."""
        self.in_flight = CallsInFlight()
        self.label = f"environment {self.name!r}" + (f" ({env.label})" if isinstance(getattr(env, "label", None), str)
                                                     else "")
        """How messages name the environment (its optional ``label`` says more: the agent's function)."""
        self._watchdog = LoopWatchdog(self.monitor, min(settings.step_timeout_s, BLOCKED_WARN_S), self._report_blocked,
                                      describe=_describe_blocking, repeat_s=BLOCKED_REPEAT_S)
        env_exit.watch(self.monitor)  # environment code's os._exit names the environment
        self.processes = processes if processes is not None else EnvironmentProcesses(getattr(env, "name", "?"))
        """The processes environment code starts: an episode's end when it is over, the rest at :meth:`close`."""
        self.lags = LoopLags()
        """How busy the event loop was while driven episodes waited (their clocks do not count it)."""

    @property
    def name(self) -> str:
        return self.settings.name

    def close(self) -> None:
        env_exit.unwatch(self.monitor)
        self._watchdog.close()
        self.pool.close()
        self.processes.close()
        self.lags.close()

    def describe_waits(self) -> str | None:
        """What the environment is doing, for the run's ``still waiting`` line (None: nothing)."""
        return self.in_flight.describe(self.label, self.pool.hung)

    def _report_blocked(self, text: str) -> None:
        get_logger().warning("event loop blocked", detail=text)
        if self.warning_sink is not None:
            self.warning_sink(text)

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
        limit = self.settings.episode_timeout_s
        clock = DrivenClock(limit, self.lags) if isinstance(self.env, DrivenEnvironment) else EpisodeClock(limit)
        token, clock_token = _EPISODE.set(owner), _CLOCK.set(clock)
        try:
            async with clock.running():
                episode = await self._episode(row, seed, sample, params or self.params)
            if clock.expired:  # the environment's code swallowed the cancellation
                raise TimeoutError
            return episode
        except TimeoutError:
            if not clock.expired:
                raise
            raise EpisodeFailed(
                f"the environment's own time in the episode passed environment.episode_timeout_s = "
                f"{limit:g} ({clock.split()}){measurable_note(limit)}", timed_out=True) from None
        finally:
            self.batcher.leave()
            _CLOCK.reset(clock_token)
            _EPISODE.reset(token)
            self.processes.end(owner)  # the episode is over (closed): what it started goes too

    # -- one episode -------------------------------------------------------------------------

    async def _episode(self, row: Mapping[str, Any], seed: int, sample: int, params: SamplingParams) -> Episode:
        if isinstance(self.env, DrivenEnvironment):
            return await self._driven(row, seed, sample, params)
        check = functools.partial(env_returns.reset_parts, max_chars=self.settings.max_opening_chars)
        messages, tools, state = await self._call("reset", self.env.reset, row, seed, check=check)
        try:
            return await self._turns(messages, tools, state, seed, sample, params)
        finally:
            closer = getattr(self.env, "close", None)
            if callable(closer):
                try:
                    await self._call("close", closer, state)
                except EpisodeFailed:
                    pass  # the episode's outcome stands; a failing close is the environment's problem

    async def _turns(self, messages: list[dict[str, Any]], tools: Sequence[ToolSchema], state: Any, seed: int,
                     sample: int, sampling: SamplingParams) -> Episode:
        s = self.settings
        prompt = self._render(self.renderer.render, messages, tools)
        prompt_cap = len(prompt) + sampling.max_new_tokens
        if self.context_tokens is not None and prompt_cap > self.context_tokens:
            raise EpisodeFailed(
                f"the opening messages render to {len(prompt)} tokens, which with the episode's "
                f"{sampling.max_new_tokens} (rollout.response_length) exceed the {self.context_tokens} one sequence "
                f"may hold (algorithm.pack_length and the model's context); shorten what reset returns")
        check_step = functools.partial(env_returns.step_parts, bounds=s.reward_range, max_chars=s.max_tool_output_chars)
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
            new, reward, done, step_metrics, new_state = await self._call(
                "step", self.env.step, state, Action(parsed, "stop", turn), check=check_step)
            rewards.append(reward)
            for key, value in step_metrics.items():
                metrics[f"env/{key}"] = metrics.get(f"env/{key}", 0.0) + value
            if new_state is not None:
                state = new_state
            if done or turn == s.max_turns - 1:
                break
            closing = [] if comp.token_ids[-len(eot):] == tuple(eot) else eot
            bridge = self._render(self.renderer.bridge, messages, new, tools) if not closing else None
            messages.extend(new)
            if bridge is None:  # not provably prefix-preserving: a fresh render, a new segment
                metrics["bridge_fallbacks"] += 1
                segments.append(seg.close())
                seg = _Open(self._render(self.renderer.render, messages, tools))
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
            final = await self._call("finish", finisher, state,
                                     check=functools.partial(env_returns.reward, what="reward", bounds=s.reward_range))
        metrics["env_s"] = self._clock().spent_s
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
        clock = _CLOCK.get()
        if not isinstance(clock, DrivenClock):  # outside run(): a clock that never stops anything
            clock = DrivenClock(float("inf"))
        chat = ChatSession(self.renderer, self.batcher, self.settings, sampling, seed, sample,
                           prompt_limit=self.prompt_limit, clock=clock)
        tracked = Tracked(clock.steps(self.env.run_episode(row, seed, chat)), f"environment {self.name!r} run_episode",
                          self.monitor)
        try:
            with self.processes.watching(_EPISODE.get()), self.in_flight.call("run_episode", chat):
                result = await tracked
        except (Exception, *EXITS) as exc:
            raise EpisodeFailed(f"environment run_episode raised {type(exc).__name__}: {exc}") from exc
        limit = self.settings.step_timeout_s
        if tracked.blocked_s > limit:
            raise EpisodeFailed(
                f"environment run_episode held the event loop for {tracked.blocked_s:.1f} s without awaiting "
                f"(more than environment.step_timeout_s = {limit:g}; a blocking call in async def)", timed_out=True)
        return chat.episode(result, self.context_tokens)

    @staticmethod
    def _clock() -> EpisodeClock | DrivenClock:
        """The clock of the episode this task runs (a stopped one outside :meth:`run`)."""
        return _CLOCK.get() or EpisodeClock(float("inf"))

    def _render(self, fn: Callable[..., Any], *args: Any) -> Any:
        """The renderer on the environment's (checked) messages: what it cannot render (a role its
        template refuses) fails the episode, naming the renderer's error."""
        try:
            return fn(*args)
        except Exception as exc:
            raise EpisodeFailed(f"the renderer could not render the environment's messages: "
                                f"{type(exc).__name__}: {exc}") from exc

    async def _call(self, what: str, fn: Callable[..., Any], *args: Any,
                    check: Callable[[Any], Any] | None = None) -> Any:
        """``check(fn(*args))``: awaited when ``fn`` is a coroutine function, else on the thread pool
        (the check too: reading a returned iterator runs environment code); under
        ``step_timeout_s``. Every failure is an :class:`EpisodeFailed` naming the call."""
        with self.in_flight.call(what):
            return await self._checked_call(what, fn, args, check or _same)

    async def _checked_call(self, what: str, fn: Callable[..., Any], args: tuple[Any, ...],
                            check: Callable[[Any], Any]) -> Any:
        limit = self.settings.step_timeout_s
        owner, clock = _EPISODE.get(), _CLOCK.get()
        if not isinstance(clock, EpisodeClock):  # outside run(): a clock that never stops anything
            clock = EpisodeClock(float("inf"))
        try:
            if not inspect.iscoroutinefunction(fn):
                try:
                    return await self._on_thread(what, fn, args, check, owner, clock)
                except CallTimedOut as exc:
                    label = f"{what} in {exc.doing}" if exc.doing else what
                    raise EpisodeFailed(f"environment {label} ran longer than environment.step_timeout_s = "
                                        f"{limit:g}{measurable_note(limit)}", timed_out=True) from None
            tracked = Tracked(fn(*args), f"environment {self.name!r} {what}", self.monitor)
            # In this task (not wait_for's own): a call that returns at once waits for no other
            # episode's turn on a busy loop, so it costs its clock nothing.
            with self.processes.watching(owner), clock.counting():
                async with asyncio.timeout(limit):
                    result = await _no_exit(tracked, what)
            if tracked.blocked_s > limit:  # a blocking call inside async def: no timeout could fire
                raise EpisodeFailed(
                    f"environment {what} held the event loop for {tracked.blocked_s:.1f} s without awaiting "
                    f"(a blocking call in async def; make it a plain def, which runs on a thread)", timed_out=True)
            return check(result)
        except asyncio.TimeoutError:
            raise EpisodeFailed(f"environment {what} ran longer than environment.step_timeout_s = {limit:g}"
                                f"{measurable_note(limit)}", timed_out=True) from None
        except TooManyHungCalls as exc:
            hung = ", ".join(f"{call} {n}x" for call, n in sorted(exc.calls.items()))
            raise RunError(
                f"environment {self.name!r}: {exc.hung} synchronous calls hang, still running "
                f"{self.pool.hang_grace_s:g} s after their environment.step_timeout_s = {limit:g} ({hung}; at most "
                f"{exc.limit} may, one per environment.workers): its code waits for something that never comes "
                f"(a lock, a network call without a timeout, input())") from None
        except EpisodeFailed:
            raise
        except env_returns.BadReturn as exc:
            raise EpisodeFailed(f"environment {what} returned {exc}") from None
        except (Exception, *EXITS) as exc:
            raise EpisodeFailed(f"environment {what} raised {type(exc).__name__}: {exc}") from exc

    async def _on_thread(self, what: str, fn: Callable[..., Any], args: tuple[Any, ...], check: Callable[[Any], Any],
                         owner: EpisodeOwner | None, clock: EpisodeClock) -> Any:
        """A plain call on the pool. The episode's clock runs while the environment's code runs
        on the thread, as that thread saw it: from when it began, if the loop learns of the start
        while that code still runs; a call over by then (a busy loop) adds its duration afterwards."""
        timing, ran = CallTiming(), False

        def started(picked_up: float) -> None:
            nonlocal ran
            if timing.ended is None:
                ran = True
                clock.resume(picked_up if timing.began is None else timing.began)
        try:
            result = await self.pool.run(
                self.processes.on_thread(owner, _checked), fn, args, check, f"environment {self.name!r} {what}", timing,
                timeout=self.settings.step_timeout_s, what=what, on_start=started)
        finally:
            if ran:
                clock.pause(timing.ended)
            elif timing.began is not None and timing.ended is not None:
                clock.add(timing.ended - timing.began)
        return result
