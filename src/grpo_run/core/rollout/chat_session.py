"""The policy as a driven episode sees it: one :class:`ChatSession` per episode.

An environment that drives its own conversation (:class:`~grpo_run.DrivenEnvironment`) calls
``await chat.complete(messages, tools)``. The session renders the messages with the run's
renderer, samples one turn through the runner's :class:`TurnBatcher` (so concurrent episodes'
turns go to the engine together, seeded from ``(group seed, sample, call index)``) and records
the episode token-in/token-out:

* when the fresh render starts with exactly the previous call's prompt and sampled ids, only the
  ids after them are appended: masked (role ``environment``, NaN log-probs), as the runner's
  bridges are; then the sampled ids with their log-probs;
* otherwise (the caller rewrote history, or the template is not prefix-preserving) a new segment
  starts from the fresh render.

Budgets are the runner's: ``max_turns`` calls, ``max_tokens_per_turn`` new ids a call, all sampled
and appended ids within the episode's budget (``rollout.response_length``; a new segment's prompt
may not outgrow the first prompt plus that budget, and the first prompt not its
:class:`PromptLimit`). A turn cut by the episode's budget ends the episode and carries no tool
calls. A call the episode cannot take raises :class:`EpisodeOver`.

Concurrent calls of one episode (an agent's ``asyncio.gather`` of sub-queries) are serialised: a
call counts against ``max_turns`` when it starts, then waits for the calls before it, and renders
and extends the ids only once they are recorded. So every turn is recorded after exactly the ids
it was sampled after (a parallel branch that does not extend them starts a new segment), and the
budgets hold whatever the concurrency.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from grpo_run.core.config.environment import EnvironmentSlot
from grpo_run.core.plugins.contracts import Renderer
from grpo_run.core.plugins.episodes import ChatTurn, EpisodeOver, Message, ToolSchema
from grpo_run.core.plugins.types import SamplingParams
from grpo_run.core.rollout import env_returns
from grpo_run.core.rollout.env_calls import EpisodeFailed
from grpo_run.core.rollout.driven_clock import DrivenClock
from grpo_run.core.rollout.episodes import Episode, OpenSegment, Segment
from grpo_run.core.rollout.turn_batcher import TurnBatcher


class ChatSession:
    """One episode's handle on the policy (implements :class:`~grpo_run.Chat`)."""

    def __init__(self, renderer: Renderer, batcher: TurnBatcher, settings: EnvironmentSlot,
                 sampling: SamplingParams, seed: int, sample: int, *,
                 prompt_limit: PromptLimit | None = None, clock: DrivenClock | None = None) -> None:
        self.clock = clock or DrivenClock(float("inf"))
        """The episode's own time: it stands still while a call waits for its turn."""
        self.pending = 0
        """Calls waiting for their turn now."""
        self.own_since = time.monotonic()
        """When the caller's own code last began to run (no call pending since)."""
        self.renderer = renderer
        self.batcher = batcher
        self.settings = settings
        self.sampling = sampling
        """The episode's sampling; ``max_new_tokens`` is its total budget."""
        self.key = (seed, sample)
        self.limit = prompt_limit or PromptLimit(None)
        self.calls = 0
        """Turns sampled."""
        self.started = 0
        """Calls started (counted against ``max_turns`` before they wait for the ones before them)."""
        self._turn_lock = asyncio.Lock()
        self.used = 0
        """Sampled and appended ids so far."""
        self.budget = sampling.max_new_tokens
        self.prompt_cap = 0
        """No segment's prompt may reach this many ids (the first prompt plus the budget)."""
        self.segments: list[Segment] = []
        self.open: OpenSegment | None = None
        self.over: str | None = None
        """Why the episode can take no more turns, once it cannot."""
        self.cut = False
        """A turn was cut by the episode's own limits (the episode's finish reason is "length")."""
        self.versions: list[tuple[int, int]] = []
        self.last_text = ""
        self.messages: list[dict[str, Any]] = []
        """The last conversation sampled after, with the sampled turn (traces)."""
        self.metrics = {"tool_calls": 0.0, "parse_errors": 0.0, "bridge_fallbacks": 0.0, "env_tokens": 0.0,
                        "generation_s": 0.0}

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSchema] = (), *,
                       max_tokens: int | None = None, stop: Sequence[str] | None = None) -> ChatTurn:
        if max_tokens is not None and max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
        self._check_open()
        if self.started >= self.settings.max_turns:  # the calls started before it may still take their turns
            raise EpisodeOver(f"the episode can take no more turns: environment.max_turns = "
                              f"{self.settings.max_turns} calls were made")
        self.started += 1
        self.pending += 1
        try:
            with self.clock.waiting():  # waiting for the policy is not the caller's time
                async with self._turn_lock:  # one turn at a time: each renders after the one before is recorded
                    self._check_open()
                    return await self._turn(messages, tools, max_tokens, stop)
        finally:
            self.pending -= 1
            if not self.pending:
                self.own_since = time.monotonic()

    def waiting(self) -> contextlib.AbstractContextManager[None]:
        return self.clock.waiting()

    def turns_left(self) -> int:
        return 0 if self.over is not None else max(0, self.settings.max_turns - self.started)

    def _check_open(self) -> None:
        if self.over is not None:
            raise EpisodeOver(f"the episode can take no more turns: {self.over}")

    async def _turn(self, messages: Sequence[Message], tools: Sequence[ToolSchema], max_tokens: int | None,
                    stop: Sequence[str] | None) -> ChatTurn:
        cap = self.prompt_cap if self.open is not None else self.limit.tokens
        chars = sum(len(m["content"]) for m in messages
                    if isinstance(m, Mapping) and isinstance(m.get("content"), str))
        if cap is not None and self.limit.surely_longer(chars, cap):  # refused before tokenising it
            self._end(f"the conversation ({chars} characters) cannot fit the episode's {cap} ids")
            self._check_open()
        ids = self.renderer.render(list(messages), list(tools))
        self._extend(ids)
        seg = self.open
        assert seg is not None
        room = min(self.settings.max_tokens_per_turn or self.budget, self.budget - self.used)
        if room <= 0:
            self._end(f"its {self.sampling.max_new_tokens} tokens (rollout.response_length) are spent")
            raise EpisodeOver(f"the episode can take no more turns: {self.over}")
        asked = min(room, max_tokens) if max_tokens is not None else room
        params = attrs.evolve(self.sampling, n=1, max_new_tokens=asked,
                              stop_strings=tuple(stop) if stop is not None else self.sampling.stop_strings)
        prompt_len = len(seg.prompt) + len(seg.ids)
        started = time.perf_counter()
        comp = await self.batcher.generate((*self.key, self.calls), seg.prompt + seg.ids, params)
        self.metrics["generation_s"] += time.perf_counter() - started
        seg.add(comp.token_ids, comp.logprobs, "assistant", self.calls)
        self.calls += 1
        self.used += len(comp.token_ids)
        self.versions.append(comp.policy_versions)
        turn = self.renderer.parse(comp.token_ids)
        if comp.finish_reason != "stop":  # cut mid-turn: its tool calls must never run
            turn = attrs.evolve(turn, tool_calls=())
            if asked == room:  # the episode's limit, not the caller's own max_tokens
                self.cut = True
                self._end(f"turn {self.calls} was cut at the episode's length limit")
        self.metrics["tool_calls"] += len(turn.tool_calls)
        self.metrics["parse_errors"] += turn.parse_error is not None
        self.last_text = turn.text
        self.messages = [*(dict(m) for m in messages), turn.message()]
        return ChatTurn(turn, tuple(comp.token_ids), tuple(comp.logprobs),
                        "stop" if comp.finish_reason == "stop" else "length", prompt_len, len(comp.token_ids))

    def _extend(self, ids: list[int]) -> None:
        """Continue the open segment with the ids past its end, or start a new one from ``ids``."""
        seg = self.open
        if seg is None:
            if self.limit.tokens is not None and len(ids) > self.limit.tokens:
                limit = self.limit
                self._end(f"the first prompt ({len(ids)} ids) is longer than {limit.tokens} ids ({limit.why})")
                self._check_open()
            self.open = OpenSegment(list(ids))
            self.prompt_cap = len(ids) + self.budget
            return
        before = seg.prompt + seg.ids
        if len(ids) > len(before) and ids[: len(before)] == before:
            extra = ids[len(before):]
            if self.used + len(extra) >= self.budget:
                self._end(f"the conversation no longer fits the episode's {self.sampling.max_new_tokens} tokens "
                          f"(rollout.response_length)")
                raise EpisodeOver(f"the episode can take no more turns: {self.over}")
            seg.add(extra, None, "environment", max(0, self.calls - 1))  # answers the previous turn
            self.used += len(extra)
            self.metrics["env_tokens"] += len(extra)
            return
        if len(ids) >= self.prompt_cap:
            self._end(f"the conversation ({len(ids)} ids) no longer fits the episode's budget")
            raise EpisodeOver(f"the episode can take no more turns: {self.over}")
        self.metrics["bridge_fallbacks"] += 1  # not an extension of the ids so far: a new segment
        if seg.ids:
            self.segments.append(seg.close())
        self.open = OpenSegment(list(ids))
        self.budget = min(self.budget, self.used + self.prompt_cap - len(ids))

    def _end(self, why: str) -> None:
        if self.over is None:
            self.over = why

    def episode(self, result: Any, context_tokens: int | None) -> Episode:
        """The episode recorded, with what ``run_episode`` returned (checked); :class:`EpisodeFailed`
        when the result breaks the contract, nothing was sampled, or a segment outgrew
        ``context_tokens`` (what one learner sequence may hold; None: unchecked)."""
        try:
            reward, result_metrics, result_text = env_returns.episode_result(result, bounds=self.settings.reward_range)
        except env_returns.BadReturn as exc:
            raise EpisodeFailed(f"environment run_episode returned {exc}") from None
        segments = self.finished_segments()
        if not segments:
            why = f"every call was refused: {self.over}" if self.over else "chat.complete was never called"
            raise EpisodeFailed(f"run_episode sampled no turn ({why}): nothing to train on")
        longest = max(len(g.prompt_ids) + len(g.completion_ids) for g in segments)
        if context_tokens is not None and longest > context_tokens:  # a learner row could not hold it
            raise EpisodeFailed(f"run_episode's conversation grew to {longest} tokens, more than the {context_tokens} "
                                f"one sequence may hold (algorithm.pack_length and the model's context)")
        metrics = dict(self.metrics)
        metrics["env_s"] = self.clock.spent_s
        for key, value in result_metrics.items():
            metrics[f"env/{key}"] = value
        metrics.update(turns=float(self.calls), segments=float(len(segments)),
                       sampled_tokens=float(sum(sum(g.sampled) for g in segments)))
        return Episode(
            segments=tuple(segments),
            text=self.last_text if result_text is None else result_text,
            finish_reason="length" if self.cut else "stop",
            policy_version=min(v[0] for v in self.versions),
            last_policy_version=max(v[1] for v in self.versions),
            env_reward=reward,
            turns=self.calls,
            messages=tuple(self.messages),
            metrics=metrics,
            train_on_env_tokens=self.settings.train_on_env_tokens,
            turn_versions=tuple(self.versions),
        )

    def finished_segments(self) -> list[Segment]:
        """Every segment with sampled ids, the open one included."""
        out = list(self.segments)
        if self.open is not None and self.open.ids:
            out.append(self.open.close())
        return out


@attrs.frozen
class PromptLimit:
    """The longest first prompt an episode may start from (``None``: no limit), and a cheap test
    that refuses a conversation far past a limit before it is tokenised."""

    tokens: int | None
    why: str = ""
    """The settings the limit comes from (for messages)."""
    longest_token: int | None = None
    """Characters of the tokenizer's longest token (``None``: unknown, no cheap test)."""

    @classmethod
    def of(cls, tokens: int | None, why: str, tokenizer: Any) -> PromptLimit:
        vocab = getattr(tokenizer, "get_vocab", None)
        longest = max((len(t) for t in vocab()), default=None) if callable(vocab) else None
        return cls(tokens, why, longest)

    def surely_longer(self, chars: int, cap: int) -> bool:
        """Messages of ``chars`` characters need more than ``cap`` ids, whatever the tokenizer makes
        of them: an id covers at most ``longest_token`` characters (times 4 for what a normaliser
        may merge)."""
        return self.longest_token is not None and chars > 4 * self.longest_token * cap
