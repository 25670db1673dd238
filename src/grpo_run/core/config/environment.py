"""The ``[environment]`` slot (multi-turn episodes); its cross-section rules are
:mod:`grpo_run.core.config.environment_rules`.

``name`` and the budgets, timeouts and reward settings below are core keys of the table; every
other key configures the chosen environment. ``[renderer]`` chooses the chat format and
``[tools.<name>]`` tables enable tools (see docs/environments.md).
"""

from __future__ import annotations

from typing import Literal

import attrs
from attrs import validators as v

from grpo_run.core.config.slots import PluginSlot
from grpo_run.core.config.validators import positive
from grpo_run.core.plugins.types import check_reward_interval

TIMING_FLOOR_S = 0.5
"""Below this, ``step_timeout_s`` and ``episode_timeout_s`` are within what a loaded machine adds
to a call that returns at once (thread scheduling, the interpreter's lock): such a limit fails
episodes for time that was not theirs. Measured (docs/reliability.md): episodes of three calls
that return at once, 128 at a time on a 2-core machine with three CPU-bound processes beside,
were counted up to 0.22 s (a call up to 0.07 s; the median episode 0.08 ms)."""


@attrs.frozen
class EnvironmentSlot(PluginSlot):
    """The environment episodes run in; without this table rollouts are single-turn."""

    max_turns: int = attrs.field(default=4, validator=positive, kw_only=True)
    """Assistant turns per episode at most."""
    max_tokens_per_turn: int | None = attrs.field(default=None, validator=v.optional(positive), kw_only=True)
    """New tokens per assistant turn at most (default: ``rollout.response_length``). The episode's
    sampled *and* environment tokens together stay within ``rollout.response_length``."""
    max_tool_output_chars: int = attrs.field(default=2000, validator=positive, kw_only=True)
    """Characters kept of each message a ``step`` returns (the rest is cut, with a note)."""
    max_opening_chars: int = attrs.field(default=32768, validator=positive, kw_only=True)
    """Characters kept of each opening message ``reset`` returns (the rest is cut, with a note);
    also the most a tool schema may take as JSON. The rendered opening must leave room for the
    episode: its tokens plus ``rollout.response_length`` within ``algorithm.pack_length`` and the
    model's context, or the episode fails (docs/environments.md)."""
    step_timeout_s: float = attrs.field(default=30.0, validator=v.gt(0.0), kw_only=True)
    """Limit of one ``reset``/``step``/``finish`` call; an overrun drops the episode."""
    episode_timeout_s: float = attrs.field(default=300.0, validator=v.gt(0.0), kw_only=True)
    """Limit of the environment's own time in one episode: its ``reset``/``step``/``finish``/``close``
    calls (the tools they call included), or, with ``run_episode`` (an agent), its code running
    and its awaits other than its model calls. Waiting for generation (the batched turns of all
    episodes, the learner and weight syncs in between), for a free environment thread, or behind a
    busy event loop (other episodes' code) does not count. An overrun drops the episode."""
    reward_range: tuple[float, float] = attrs.field(default=(-100.0, 100.0), validator=check_reward_interval, kw_only=True)
    """The closed interval each reward of the environment must lie in: every ``step``'s, ``finish``'s
    and ``run_episode``'s. A reward outside it (``1e308``, a score in the thousands) fails its
    episode, counted like any failing episode, as a verifier's score outside its ``score_range``
    fails its call. At most 1e6 either way, so no sum of rewards can overflow."""
    reward_combination: Literal["last", "sum", "discounted"] = attrs.field(default="sum", kw_only=True)
    """How per-turn rewards combine: the last turn's, their sum, or ``sum(discount**t * r_t)``.
    The row's verifiers (scoring the last turn's text) and ``finish`` add to it."""
    discount: float = attrs.field(default=1.0, validator=[v.gt(0.0), v.le(1.0)], kw_only=True)
    """Per-turn discount of ``reward_combination = "discounted"``."""
    train_on_env_tokens: bool = attrs.field(default=False, kw_only=True)
    """Count environment messages and template scaffolding in the loss (Open Instruct's
    ``mask_tool_use = false``); off: only sampled tokens train."""
    success_threshold: float | None = attrs.field(default=None, validator=v.optional(v.gt(0.0)), kw_only=True)
    """An episode is *solved* (``eval/accuracy``, ``reward/solve_rate``, ``stop_at_eval_accuracy``,
    the report, ``grpo-run eval``) when its whole reward, the verifiers' score plus the
    environment's, reaches this. Unset: where the run's verifiers can reward the row, their
    verdict on the last turn decides, as for single-turn rows; where only the environment rewards
    it (``scoring.row_verifiers = false``), an environment reward of at least 1.0."""
    workers: int = attrs.field(default=4, validator=positive, kw_only=True)
    """Threads that run synchronous environment code (never the event loop); with ``isolation =
    "process"``, also the number of worker processes."""
    isolation: Literal["thread", "process"] = attrs.field(default="thread", kw_only=True)
    """Where ``reset``/``step``/``finish``/``close`` run: ``"thread"``, in the trainer process;
    ``"process"``, in ``workers`` worker processes of their own (an episode stays on one), whose
    memory ``max_worker_rss_mb`` can bound. Then the environment's config, rows, actions, results
    and episode ``state`` must pickle; an environment with ``run_episode`` cannot run there."""
    max_worker_rss_mb: int = attrs.field(default=0, validator=v.ge(0), kw_only=True)
    """With ``isolation = "process"``: a worker whose resident memory is above this after a call
    takes no new episode and is replaced, and ended once its open episodes are closed. 0: no limit."""
    advantage_granularity: Literal["trajectory", "turn"] = attrs.field(default="trajectory", kw_only=True)
    """``"trajectory"``: every token of an episode gets its group advantage. ``"turn"``: the tokens
    of turn ``t`` get the return-to-go ``G_t = sum_{t' >= t} discount**(t'-t) r_t' + F`` (``F``: the
    verifiers' score and ``finish``), centred and scaled by the group statistics of the episode
    returns ``G_0`` (docs/environments.md)."""
