"""Optional abilities of components, as named protocols.

A component has the required members of its family (:mod:`grpo_run.core.plugins.contracts`);
anything more it may offer is one of the protocols below. The engine asks
``isinstance(component, StreamingEngine)`` -- never ``getattr(component, "generate_stream")`` --
so every optional member the engine uses is written down here, typed and documented, and a
plugin author can see at a glance what an ability takes.

All protocols are ``runtime_checkable``: ``isinstance`` checks that the members exist (not their
signatures), so a class has an ability simply by defining its members.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

from grpo_run.core.plugins.adapters import AdapterSlots, LoraAdapter
from grpo_run.core.plugins.episodes import Chat, EpisodeResult
from grpo_run.core.plugins.types import Completion, MemoryPart, MemoryRequest, SamplingParams, VerifierResult

from grpo_run.core.plugins.trace_records import CompletionTrace


# ---------------------------------------------------------------------------------------------
# Any component
# ---------------------------------------------------------------------------------------------


@runtime_checkable
class Stateful(Protocol):
    """Keeps state that a checkpoint must hold for ``--resume`` to continue exactly.

    Used for engines (e.g. the ``hf`` engine's sampling-seed counter) and samplers (every sampler
    must be stateful). ``state_dict`` returns plain data (numbers, strings, lists, dicts, tensors);
    it is saved in the checkpoint and handed back to ``load_state_dict`` of a freshly built
    component on resume.
    """

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


# ---------------------------------------------------------------------------------------------
# Engines
# ---------------------------------------------------------------------------------------------


@runtime_checkable
class StreamingEngine(Protocol):
    """An engine that yields each prompt's group as soon as it is finished.

    The loop then scores early groups while later ones are still generating. Groups may come in
    any order; each prompt index must be yielded exactly once.
    """

    def generate_stream(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> AsyncIterator[tuple[int, list[Completion]]]: ...


@runtime_checkable
class TakesAdapters(Protocol):
    """An engine that takes a LoRA run's adapter at each weight sync instead of the merged weights.

    With ``[model.lora]`` the run syncs adapters (``model.lora.sync = "adapter"``, the default where
    the engine can) and builds the engine with ``EngineContext.adapters`` set: the engine keeps
    its base model and loads each :class:`~grpo_run.LoraAdapter` through ``update_adapter``
    (never ``update_weights``); completions started afterwards carry ``version``. An adapter
    replaces the one of the same ``name``; completions with none loaded yet come from the base
    model. Like ``update_weights`` it must not block the event loop; a failure ends the run
    naming the engine.

    ``refuses_adapter`` is asked before anything is built, with the engine's ``config`` and the
    run's LoRA config in peft's form (the keys of ``adapter_config.json``: ``r``, ``lora_alpha``,
    ``target_modules``, ``use_dora``, ``modules_to_save``, ...): the reason this engine cannot
    serve such an adapter, starting with the key at fault (``"use_dora: vLLM cannot serve DoRA
    adapters"``), or ``None`` when it can. A refused run syncs merged weights, or with an explicit
    ``sync = "adapter"`` stops with a config error giving that reason.
    """

    @classmethod
    def refuses_adapter(cls, config: Any, lora: Mapping[str, Any]) -> str | None: ...

    async def update_adapter(self, adapter: LoraAdapter, version: int) -> None: ...


@runtime_checkable
class ServesAdapters(Protocol):
    """An engine (with :class:`TakesAdapters`) that holds several named adapters on one base model
    at once and samples each request with the one its ``SamplingParams.adapter`` names: what a
    sweep (``grpo-run sweep``) needs, one adapter per variant.

    The engine is built with ``EngineContext.adapters.count`` slots (the sweep's variants) and
    ``max_rank`` / ``target_modules`` covering every variant's adapter. ``update_adapter`` loads
    one adapter by name and ``version`` is that adapter's own: completions carry the version of the
    adapter that made them. A request naming an adapter not loaded yet samples from the base
    model (a variant before its first sync); ``adapter = None`` keeps the single-adapter meaning
    (the adapter last loaded). An update of one adapter must not hold back the others' requests
    for longer than it takes.

    ``refuses_adapters`` is asked before anything is built, with the engine's ``config`` and the
    slots it would get: the reason it cannot serve that many adapters at once (starting with the
    key at fault), or ``None``.
    """

    @classmethod
    def refuses_adapters(cls, config: Any, slots: AdapterSlots) -> str | None: ...


@runtime_checkable
class BatchesRequests(Protocol):
    """An engine that generates several requests in one batch: what a sweep gathers from its
    variants when the engine does not batch concurrent requests itself (``continuous_batching``).

    ``requests`` are ``(prompt_ids, params)`` pairs, each as ``generate`` would take it (its own
    ``n``, ``seed`` and ``adapter``); the result holds, per request, what ``generate`` would have
    returned for it alone -- the same completions for the same seed, up to floating-point
    reordering in the larger batch. Requests whose sampling settings differ (``temperature``,
    ``max_new_tokens``, ...) may be generated one after the other.
    """

    async def generate_batch(
        self, requests: Sequence[tuple[Sequence[Sequence[int]], SamplingParams]]
    ) -> list[list[list[Completion]]]: ...


@runtime_checkable
class PlansMemory(Protocol):
    """A component that says, before it is built, what memory it will hold.

    ``grpo-run plan`` and the automatic token budget (``learner.max_tokens_per_forward = "auto"``)
    ask engines -- and verifiers that hold a model, such as ``reward_model`` -- through this
    classmethod, with the component's structured ``config`` (the run's defaults applied) and the
    run's sizes; each returned :class:`~grpo_run.MemoryPart` is shown in the plan and counted
    where it lives. It may read a model's ``config.json``; it loads no weights. Used for engines
    and verifiers; a component without it counts as nothing.
    """

    @classmethod
    def memory_parts(cls, config: Any, request: MemoryRequest) -> Sequence[MemoryPart]: ...


# ---------------------------------------------------------------------------------------------
# Samplers
# ---------------------------------------------------------------------------------------------


@runtime_checkable
class RewardFeedbackSampler(Protocol):
    """A sampler that learns from the rewards of the prompts it drew (e.g. to retire solved ones).

    After each group is scored the loop calls ``update`` with the row's ``"id"``, the group's
    rewards and whether each completion solved the row (its correctness verifiers said right,
    ``scoring.correctness_verifiers``; a format reward beside them does not change that).
    """

    def update(self, row_id: str, rewards: Sequence[float], solved: Sequence[bool]) -> None: ...


@runtime_checkable
class RefillingSampler(Protocol):
    """A sampler that asks the loop to replace groups without a reward spread (active sampling).

    With ``wants_nonzero_std`` true, the loop keeps drawing (a bounded number of rounds) until the
    batch holds ``rollout.num_unique_prompts_rollout`` groups whose rewards are not all equal.
    """

    wants_nonzero_std: ClassVar[bool]


# ---------------------------------------------------------------------------------------------
# Environments
# ---------------------------------------------------------------------------------------------


@runtime_checkable
class DrivenEnvironment(Protocol):
    """An environment that drives its own conversation: it calls the policy, instead of the
    runner calling ``reset``/``step`` (adapters of agent code and of other frameworks' rollouts).

    ``run_episode`` must be ``async def``. It gets the prompt row, the group's initial-state
    ``seed`` (the same for the G samples of a group) and a :class:`~grpo_run.Chat` handle of its
    own; it samples turns with ``await chat.complete(messages, tools)`` as often as it likes
    (within ``environment.max_turns`` calls and the episode's token budgets: past them
    ``complete`` raises :class:`~grpo_run.EpisodeOver`) and returns an
    :class:`~grpo_run.EpisodeResult` (or a bare reward). Such an environment needs no
    ``reset``/``step``; ``finish``/``close`` are not called. Its own time (all but its
    ``complete`` calls) runs under ``environment.episode_timeout_s``; raising, overrunning,
    holding the event loop longer than ``environment.step_timeout_s`` or making no call drops the
    episode (counted). An optional ``label`` attribute (a str) says more in the run's messages
    than the environment's name (the ``agent`` environment: its function).
    """

    async def run_episode(self, row: Mapping[str, Any], seed: int, chat: Chat) -> EpisodeResult | float: ...


# ---------------------------------------------------------------------------------------------
# Verifiers
# ---------------------------------------------------------------------------------------------


@runtime_checkable
class BatchVerifier(Protocol):
    """A verifier that scores many completions in one call (sync or ``async def``).

    ``items`` are ``(completion, ground_truth, row)`` tuples; return one result per item, in
    order. Used instead of ``score`` for every call of the verifier. A batch of ``n`` items has
    ``n`` times the per-call time limit; when it overruns, raises or returns the wrong number of
    results, every item in it fails. ``n`` is at most 64, or the verifier's ``max_batch_size``
    (:class:`CapsBatchSize`).
    """

    def score_batch(self, items: Sequence[tuple[str, Any, Mapping[str, Any]]]) -> list[VerifierResult | float]: ...


@runtime_checkable
class CapsBatchSize(Protocol):
    """A :class:`BatchVerifier` whose batches must hold at most ``max_batch_size`` items: a class
    attribute, or a field of its ``Config`` when the size is an option (the config's wins)."""

    max_batch_size: ClassVar[int]


@runtime_checkable
class DeclaresScoreRange(Protocol):
    """A verifier class (or its ``Config``, when the range depends on options) declaring the
    closed interval its scores lie in; ``(0.0, 1.0)`` when nothing declares one.

    A score outside the range is a failed call. The top of the range is what the verifier can add
    to a row's maximum reward (``weight x top``), and what counts as solved.
    """

    score_range: tuple[float, float]


@runtime_checkable
class ShapingConfig(Protocol):
    """A verifier ``Config`` that shapes rewards rather than adding to them only on its own rows.

    :class:`~grpo_run.ShapingVerifierConfig` implements it (extend that class); the scorer reads
    these three fields from any config that has them.
    """

    mode: Literal["additive", "gate"]
    gate_fail_reward: float
    all_rows: bool


@runtime_checkable
class ScoreRescaler(Protocol):
    """What :meth:`RescalesScores.rescaler` returns: turns a verifier's raw scores into its scores,
    in the training process, and keeps state across calls (running statistics).

    ``rescale`` gets the raw scores of one scorer call (the applicable, successful calls of this
    verifier, in row order) and returns one score per raw score, each inside the verifier's score
    range (:class:`DeclaresScoreRange`); a score outside it, or a raise, fails those calls.
    ``training`` is False for evaluations: the rescaler then must not change its state.
    ``state_dict`` / ``load_state_dict`` as for :class:`Stateful`: saved in every checkpoint, so a
    resumed run continues the statistics exactly.
    """

    def rescale(self, raw: Sequence[float], training: bool) -> list[float]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


@runtime_checkable
class RescalesScores(Protocol):
    """A verifier ``Config`` whose verifier returns raw scores (any finite number within
    ``[-1e6, 1e6]``) that a stateful :class:`ScoreRescaler` turns into its scores.

    The scorer builds one rescaler per run (``rescaler()``) in the training process, whichever
    process or node the verifier itself runs in, so the state is one, its updates follow the
    order of the rows, and checkpoints hold it. The score range is checked after rescaling.
    """

    def rescaler(self) -> ScoreRescaler: ...


@runtime_checkable
class OwnWorker(Protocol):
    """A verifier ``Config`` whose verifier runs in a scoring worker of its own (it loads a model
    once, and one copy is enough), not in each of the shared ``scoring.num_workers`` workers.

    With ``distributed.backend = "ray"`` that worker lives in a Ray actor of its own, which asks
    for ``worker_resources`` (``num_cpus``, ``num_gpus`` and custom resources, as
    ``distributed.scoring_resources``). Batches of such a verifier are not split to spread over
    workers, and its worker is not recycled (``scoring.max_calls_per_worker``, ``max_worker_rss_mb``).
    With ``scoring.num_workers = 0`` it runs in the training process like the others.
    """

    @property
    def worker_resources(self) -> Mapping[str, float]: ...


@runtime_checkable
class AsyncClosable(Protocol):
    """An async verifier holding loop resources (an HTTP client): the scorer awaits ``aclose()``
    when it closes, on the event loop the verifier ran on."""

    async def aclose(self) -> None: ...


# ---------------------------------------------------------------------------------------------
# Trackers
# ---------------------------------------------------------------------------------------------


@runtime_checkable
class LogsCompletions(Protocol):
    """A tracker that shows sample completions as a table (a W&B table, TensorBoard text, an
    MLflow table artifact).

    Called whenever the run writes a rollout trace (every ``logging.log_rollouts_every`` steps
    for ``kind = "train"``, at each evaluation for ``kind = "eval"``) with the records written to
    ``rollouts/<kind>_<step>.jsonl``. A failure is logged, never fatal.
    """

    def log_completions(self, step: int, kind: str, traces: Sequence[CompletionTrace]) -> None: ...
