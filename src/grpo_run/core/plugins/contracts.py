"""The component contracts: what each plugin family provides and what the engine calls.

A component is a plain class with two class attributes:

* ``name`` -- unique within its family (``"dapo"``, ``"math"``, ``"hf"``);
* ``Config`` -- a frozen ``attrs`` class; the TOML table of the slot that selects the component is
  structured into it (minus the ``name`` key) and the instance is passed to the constructor.

Plugins register component classes through the ``grpo_run_register_*`` hooks
(:mod:`grpo_run.core.plugins.hookspecs`). The hot loop then calls the constructed objects directly.
The protocols below are the contracts; components need not inherit from anything.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, runtime_checkable

import attrs

if TYPE_CHECKING:  # torch is only needed for annotations; keeps `import grpo_run` light
    import torch

# --------------------------------------------------------------------------------------------
# Families
# --------------------------------------------------------------------------------------------

FAMILIES: tuple[str, ...] = (
    "verifier",
    "loss",
    "kl",
    "sampler",
    "engine",
    "task",
    "model",
    "tracker",
)
"""Every component family the engine knows; each has one registration hook."""


@attrs.frozen
class NoConfig:
    """Config for a component that takes no options."""


# --------------------------------------------------------------------------------------------
# Data carried between stages
# --------------------------------------------------------------------------------------------


@attrs.frozen
class SamplingParams:
    """How an engine should sample."""

    n: int = 1
    """Completions per prompt (G)."""
    max_new_tokens: int = 32
    temperature: float = 1.0
    top_p: float = 1.0
    greedy: bool = False
    """Greedy decoding (evaluation); ``temperature``/``top_p`` are then ignored."""
    stop_strings: tuple[str, ...] = ()
    seed: int | None = None


@attrs.frozen
class Completion:
    """One sampled completion, as produced by a generation engine."""

    token_ids: tuple[int, ...]
    """Generated tokens, including the stop/EOS token when generation stopped."""
    logprobs: tuple[float, ...]
    """Engine log-probability of each generated token (same length as ``token_ids``)."""
    text: str
    """Decoded completion without special tokens."""
    finish_reason: str
    """``"stop"`` (EOS or a stop string) or ``"length"`` (hit ``max_new_tokens``)."""
    policy_version: int
    """Learner step whose weights produced this completion."""


@attrs.frozen
class VerifierResult:
    """A verifier's verdict on one completion."""

    score: float
    """Score before the verifier's weight is applied, within the verifier's ``score_range``
    (``[0, 1]`` unless the verifier declares another)."""
    applicable: bool = True
    """False when the verifier has nothing to say about this row (it then adds nothing)."""
    metrics: Mapping[str, float] = attrs.field(factory=dict)
    """Extra named numbers, averaged per step under ``verifier/<name>/<key>``."""


@attrs.frozen
class VerifierConfig:
    """Base config every verifier's ``Config`` should extend: the weight of its score."""

    weight: float = attrs.field(default=1.0, validator=attrs.validators.ge(0.0))
    """Reward contributed = weight x score."""


def _finite(_inst: Any, attribute: attrs.Attribute, value: float) -> None:
    if not math.isfinite(value):
        raise ValueError(f"must be a finite number, got {value}")


@attrs.frozen
class ShapingVerifierConfig(VerifierConfig):
    """Config of a verifier that shapes every reward rather than checking an answer (``format``,
    ``length``, ``non_stop_penalty``): it may gate the reward and, by default, scores every row.

    The scorer reads ``mode``, ``gate_fail_reward`` and ``all_rows`` from *any* verifier config
    that has them (extending this class is the easy way); without them a verifier is additive
    and scores only the rows that name it.
    """

    mode: Literal["additive", "gate"] = "additive"
    """``"additive"``: the row's reward gains ``weight x score``. ``"gate"``: the verifier adds
    nothing (its weight is unused); when its score is below the top of its ``score_range``, or its
    call failed, the row's total reward becomes ``gate_fail_reward`` whatever the other verifiers
    gave (negative and above-maximum rewards included); otherwise the reward is left unchanged."""
    gate_fail_reward: float = attrs.field(default=0.0, validator=_finite)
    """The row's total reward when this gate fails (not scaled by ``scoring.verification_reward``);
    when several gates fail the lowest of their ``gate_fail_reward`` applies."""
    all_rows: bool = True
    """Score every row, whatever its ``verifier`` column names (the verifier needs no ground
    truth; it gets ``None``). False: only rows that name it."""


FINISH_REASON_KEY = "finish_reason"
"""Row key under which the scorer passes a completion's finish reason (``"stop"``, ``"length"``)
to verifiers, when the caller gives one (``RewardScorer.score(..., finish_reasons=...)``)."""
NUM_TOKENS_KEY = "num_tokens"
"""Row key under which the scorer passes a completion's length in tokens, when the caller gives
one (``RewardScorer.score(..., num_tokens=...)``)."""


@attrs.frozen
class LossInputs:
    """Per-token tensors on packed learner rows, all shaped ``[rows, length]``.

    Only positions where ``mask`` is true are completion tokens that carry a loss; everything
    else (prompt tokens, padding) must contribute exactly zero.
    """

    logprobs: torch.Tensor
    """log pi_theta(token), with grad."""
    old_logprobs: torch.Tensor
    """log pi_old(token), no grad (the policy that sampled, as the learner computes it)."""
    advantages: torch.Tensor
    """Group-relative advantage of the token's sequence, broadcast over its tokens."""
    mask: torch.Tensor
    """bool: true on completion tokens that count in the loss."""
    seq_ids: torch.Tensor
    """long: index of the sequence the token belongs to (``-1`` on padding)."""
    num_seqs: int
    """Number of sequences in the rows (``seq_ids`` range over ``0..num_seqs-1``)."""


@attrs.frozen
class LossOutput:
    """What a loss returns: a per-token loss (aggregated by the engine) and metrics."""

    per_token_loss: torch.Tensor
    """``[rows, length]``; zero where ``mask`` is false."""
    metrics: Mapping[str, torch.Tensor | float] = attrs.field(factory=dict)
    """Scalar diagnostics (e.g. ``clip_frac_low``), averaged per step under ``loss/``."""


# --------------------------------------------------------------------------------------------
# Family protocols
# --------------------------------------------------------------------------------------------


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


@attrs.frozen
class EngineContext:
    """What the engine needs to build a generator."""

    model_path: str
    """Local directory (or hub id) of the starting weights in Hugging Face format."""
    tokenizer: Any
    """The run's tokenizer (a transformers tokenizer)."""
    dtype: torch.dtype
    device: str
    seed: int
    attn_implementation: str = "sdpa"


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
