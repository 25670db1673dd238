"""The family contracts: what each kind of plugin provides and what the engine calls.

A component is a plain class with two class attributes:

* ``name`` -- unique within its family (``"dapo"``, ``"math"``, ``"hf"``);
* ``Config`` -- a frozen ``attrs`` class; the TOML table of the slot that selects the component is
  structured into it (minus the core keys such as ``name``) and the instance is passed to the
  constructor.

Plugins register component classes through the ``grpo_run_register_*`` hooks
(:mod:`grpo_run.core.plugins.hookspecs`). The hot loop then calls the constructed objects
directly. The protocols below are the required members; components need not inherit from
anything. Optional abilities (streaming, state, reward feedback ...) are the named protocols of
:mod:`grpo_run.core.plugins.abilities`; the engine tests for them with ``isinstance``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from grpo_run.core.plugins.episodes import Action, EnvReset, EnvStep, Message, ParsedTurn, ToolSchema
from grpo_run.core.plugins.types import (
    Completion,
    EngineContext,
    LossInputs,
    LossOutput,
    SamplingParams,
    VerifierResult,
)

if TYPE_CHECKING:
    import torch


@runtime_checkable
class Verifier(Protocol):
    """Scores a completion against a row's ground truth.

    ``score`` is either a plain method or ``async def``:

    * **sync** verifiers run in the scorer's worker processes, so the class and its config must
      be picklable (module level); ``score`` must not rely on ``signal`` (it may run outside the
      main thread). An overrunning call is stopped by killing its worker.
    * **async** verifiers (``async def score``) run on the event loop of the training process,
      built there on first use; an overrunning call is cancelled (``asyncio``), so ``score`` must
      await rather than block and must let ``CancelledError`` through. Limit your own concurrency
      (e.g. an HTTP client's pool); the scorer starts every call of a batch at once. If the
      instance has an ``async def aclose()``, the scorer awaits it when it is closed.

    Optional members the scorer uses when present:

    * ``score_batch(items) -> list[VerifierResult | float]`` (sync or ``async def``), ``items``
      being ``(completion, ground_truth, row)`` tuples: used instead of ``score`` for every call
      of the verifier; one result per item, in order. A batch of ``n`` items has ``n`` times the
      per-call time limit; when it overruns, raises or returns the wrong number of results,
      every item in it fails. ``max_batch_size`` (class attribute, default 64) caps ``n``.
    * ``score_range: ClassVar[tuple[float, float]]`` -- the closed interval scores lie in,
      ``(0.0, 1.0)`` by default; a penalty declares e.g. ``(-1.0, 0.0)``. A score outside it is
      a failed call. When the range depends on options, the ``Config`` may define it instead
      (a ``score_range`` property). The top of the range is what the verifier can add to a
      row's maximum reward (``weight x top``).

    The ``row`` mapping is a copy of the dataset row; when the caller knows them the scorer adds
    the completion's finish reason under :data:`FINISH_REASON_KEY` and its token count under
    :data:`NUM_TOKENS_KEY`. A verifier that needs one and does not find it should raise (the
    call is then counted as failed and logged with the row id).

    Combining (additive or gate, every row or only rows that name the verifier) is the scorer's
    job, driven by the config fields described in :class:`ShapingVerifierConfig`.
    """

    name: ClassVar[str]
    Config: ClassVar[type]

    def __init__(self, config: Any) -> None: ...

    def score(self, completion: str, ground_truth: Any, row: Mapping[str, Any]) -> VerifierResult | float:
        """Score one completion; a bare float means an applicable score. May be ``async def``."""
        ...


@runtime_checkable
class Loss(Protocol):
    """A policy-gradient surrogate computed per token; the engine aggregates it."""

    name: ClassVar[str]
    Config: ClassVar[type]

    def __init__(self, config: Any) -> None: ...

    def __call__(self, inputs: LossInputs) -> LossOutput: ...


@runtime_checkable
class KLEstimator(Protocol):
    """Per-token KL penalty estimate from policy and reference log-probs."""

    name: ClassVar[str]
    Config: ClassVar[type]

    def __init__(self, config: Any) -> None: ...

    def __call__(self, logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
        """Return ``[rows, length]`` per-token KL estimates (the engine masks and weights them)."""
        ...


@runtime_checkable
class Sampler(Protocol):
    """Chooses which prompt rows go into each rollout batch."""

    name: ClassVar[str]
    Config: ClassVar[type]

    def __init__(self, config: Any, rows: Sequence[Mapping[str, Any]], seed: int) -> None: ...

    def sample(self, n: int) -> list[Mapping[str, Any]]:
        """Return the next ``n`` prompt rows."""
        ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


@runtime_checkable
class GenerationEngine(Protocol):
    """Samples completions; holds its own copy of the weights, updated by the engine loop."""

    name: ClassVar[str]
    Config: ClassVar[type]

    def __init__(self, config: Any, context: EngineContext) -> None: ...

    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Completion]]:
        """Return ``params.n`` completions for each prompt (token ids), in prompt order.

        Must not block the event loop (run model code in a thread or another process).
        """
        ...

    async def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Load new policy weights; completions started afterwards carry ``version``."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class Task(Protocol):
    """A procedural prompt source: makes train and eval rows in the standard row format.

    A row is a mapping with ``id``, ``messages`` (chat) or ``prompt`` (plain text),
    ``ground_truth`` and ``verifier`` (a verifier name or a list of names).
    """

    name: ClassVar[str]
    Config: ClassVar[type]

    def __init__(self, config: Any) -> None: ...

    def train_rows(self) -> Sequence[Mapping[str, Any]]: ...

    def eval_rows(self) -> Sequence[Mapping[str, Any]]: ...


@runtime_checkable
class Transform(Protocol):
    """Rewrites a prompt row as it loads (a data source's ``transform``), or drops it.

    Called once per row, after the source's columns were mapped to the standard keys
    (``prompt`` or ``messages``, ``ground_truth``, ``verifier``, ``id``, ``dataset``) and before
    the row is checked, so it can derive the ground truth (``"gsm8k"``: ``... #### 72`` -> ``72``),
    build a prompt, or filter rows. Runs in the training process when the data loads (and in
    ``grpo-run check``); raising :class:`ValueError` names the row in a data error.
    """

    name: ClassVar[str]
    Config: ClassVar[type]

    def __init__(self, config: Any) -> None: ...

    def __call__(self, row: dict[str, Any]) -> Mapping[str, Any] | None:
        """The transformed row (``row`` may be changed in place and returned), or ``None`` to
        leave the row out."""
        ...


@runtime_checkable
class ModelSource(Protocol):
    """A named model that is built or shipped locally, selected by ``model.name_or_path``."""

    name: ClassVar[str]
    Config: ClassVar[type]

    def __init__(self, config: Any) -> None: ...

    def resolve(self) -> str:
        """Return a local directory holding the model and tokenizer in Hugging Face format."""
        ...


@runtime_checkable
class Tracker(Protocol):
    """Receives per-step metrics (files, dashboards)."""

    name: ClassVar[str]
    Config: ClassVar[type]

    def __init__(self, config: Any, run_dir: str) -> None: ...

    def log(self, step: int, metrics: Mapping[str, float]) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class Tool(Protocol):
    """A callable the model may use in an episode, described by a JSON schema.

    Enabled with a ``[tools.<name>]`` table; environments receive the enabled tools by name.
    ``__call__`` is synchronous: the episode runner calls it on a bounded thread pool, never on the
    event loop, under ``environment.step_timeout_s``. A bad call raises :class:`grpo_run.ToolError`
    (its message goes back to the model); the result is the tool's answer as text.
    """

    name: ClassVar[str]
    Config: ClassVar[type]

    def __init__(self, config: Any) -> None: ...

    def schema(self) -> ToolSchema:
        """The tool in OpenAI function form (``{"type": "function", "function": {...}}``)."""
        ...

    def __call__(self, arguments: Mapping[str, Any]) -> str: ...


@runtime_checkable
class Environment(Protocol):
    """A multi-turn episode: opening messages, then a reply to each assistant turn.

    ``reset`` and ``step`` are plain methods or ``async def``; plain ones run on the episode
    runner's bounded thread pool (never on the event loop), each under a timeout. The same
    ``row`` and ``seed`` must give the same initial state: the G samples of a group share it.

    Optional members the runner calls when present: ``finish(state) -> float`` (a final reward,
    added to the combined per-turn rewards) and ``close(state)`` (always called, also after an
    error or a timeout). Raising in any of them drops the episode (counted; the run goes on).
    """

    name: ClassVar[str]
    Config: ClassVar[type]

    def __init__(self, config: Any, tools: Mapping[str, Tool]) -> None: ...

    def reset(self, row: Mapping[str, Any], seed: int) -> EnvReset: ...

    def step(self, state: Any, action: Action) -> EnvStep: ...


@runtime_checkable
class Renderer(Protocol):
    """Owns the chat format of episodes: messages to token ids, token ids to a parsed turn.

    Token-in/token-out: the runner never re-tokenises a conversation; it appends the sampled ids
    and the ids ``bridge`` returns for environment messages.
    """

    name: ClassVar[str]
    Config: ClassVar[type]

    def __init__(self, config: Any, tokenizer: Any) -> None: ...

    def render(self, messages: Sequence[Message], tools: Sequence[ToolSchema]) -> list[int]:
        """The prompt ids of ``messages`` (with ``tools`` offered), ending with the assistant opener."""
        ...

    def parse(self, token_ids: Sequence[int]) -> ParsedTurn:
        """Read one sampled assistant turn (end-of-turn token included when it stopped)."""
        ...

    def bridge(
        self, messages: Sequence[Message], new_messages: Sequence[Message], tools: Sequence[ToolSchema]
    ) -> list[int] | None:
        """The ids to append after a conversation whose last message is a sampled assistant turn
        that ended with the end-of-turn token: ``new_messages`` and the next assistant opener.

        ``None`` when that cannot be proven to equal a fresh render of the whole conversation
        (the template is not prefix-preserving): the runner then starts a new segment.
        """
        ...

    def end_of_turn_ids(self) -> list[int]:
        """The ids that close an assistant turn (appended, masked, after a turn stopped otherwise)."""
        ...
