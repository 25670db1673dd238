"""The data components exchange with the engine: sampling requests, completions, verifier
verdicts, loss inputs and outputs, and the base config classes plugins extend.

Everything here is re-exported by :mod:`grpo_run`; plugins import it from there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import attrs

from grpo_run.core.plugins.adapters import AdapterSlots

if TYPE_CHECKING:  # torch is only needed for annotations; keeps `import grpo_run` light
    import torch


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
    """The call's sampling seed. The loop always sets it (from ``run.seed`` and the batch or
    evaluation step); an engine derives what it draws from it and the prompt and sample index
    alone, so the same request draws the same completions whatever came before."""
    adapter: str | None = None
    """The LoRA adapter to sample with, by name: a sweep's variant (an engine with
    :class:`~grpo_run.ServesAdapters`; one not loaded yet samples from the base model). ``None``:
    the engine's policy, the adapter it last loaded or its own weights."""


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
    """Learner step whose weights produced this completion (its first token, when an in-flight
    weight update landed while it was generated)."""
    last_policy_version: int | None = None
    """Learner step whose weights produced its last token, when that differs from
    ``policy_version`` (an engine with in-flight updates); ``None``: the same version."""

    @property
    def policy_versions(self) -> tuple[int, int]:
        """``(oldest, newest)`` policy version among the weights that produced its tokens."""
        last = self.policy_version if self.last_policy_version is None else self.last_policy_version
        return self.policy_version, last


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


REWARD_LIMIT = 1e6
"""The largest magnitude a reward may reach: a verifier's ``weight x score_range``, a gate's
``gate_fail_reward``, ``scoring.verification_reward``, an ``environment.reward_range``. Past it a
reward is almost surely a bug, and group means and deviations come close to overflowing."""


def reward_interval(value: Any) -> tuple[float, float]:
    """``value`` as a closed interval of rewards ``(low, high)``: two finite numbers, ``low <
    high``, within ``[-REWARD_LIMIT, REWARD_LIMIT]``. The one check of every such range (an
    environment's ``reward_range``, a verifier's ``score_range``, a reward model's ``clip``);
    raises :class:`ValueError` saying what is wrong, for the caller to put under its key."""
    try:
        low, high = (float(x) for x in value)
    except (TypeError, ValueError):
        raise ValueError(f"must be two numbers [low, high], got {value!r}") from None
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ValueError(f"must be two finite numbers [low, high] with low < high, got {[low, high]}")
    if max(abs(low), abs(high)) > REWARD_LIMIT:
        raise ValueError(f"must lie within [-{REWARD_LIMIT:g}, {REWARD_LIMIT:g}] (scale rewards down), got [{low:g}, {high:g}]")
    return low, high


def check_reward_interval(_inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    """:func:`reward_interval` as an ``attrs`` validator (``None`` passes: an unset option)."""
    if value is None:
        return
    try:
        reward_interval(value)
    except ValueError as exc:
        raise ValueError(f"{attribute.name} {exc}") from None


def _weight(_inst: Any, attribute: attrs.Attribute, value: float) -> None:
    if not 0.0 <= value <= REWARD_LIMIT:  # NaN fails too
        raise ValueError(f"{attribute.name} must be a number in [0, {REWARD_LIMIT:g}] (scale rewards down), got {value}")


@attrs.frozen
class VerifierConfig:
    """Base config every verifier's ``Config`` should extend: the weight of its score."""

    weight: float = attrs.field(default=1.0, validator=_weight)
    """Reward contributed = weight x score; at most ``1e6`` (and ``weight x`` the score range's
    largest magnitude at most ``1e6`` too)."""


def _finite(_inst: Any, attribute: attrs.Attribute, value: float) -> None:
    if not math.isfinite(value) or abs(value) > REWARD_LIMIT:
        raise ValueError(f"{attribute.name} must be a finite number in [-{REWARD_LIMIT:g}, {REWARD_LIMIT:g}], got {value}")


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
    when several gates fail the lowest of their ``gate_fail_reward`` applies. At most ±1e6."""
    all_rows: bool = True
    """Score every row, whatever its ``verifier`` column names (the verifier gets the row's
    ``ground_truth`` as it is, ``None`` when it has none). False: only rows that name it."""


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
    overlaps_learner: bool = False
    """Whether learner steps run while this engine generates (``rollout.async_steps > 1``): an
    engine sharing the machine's cores with the learner may then leave it some."""
    adapters: AdapterSlots | None = None
    """Set when the run syncs LoRA adapters instead of full weights (``[model.lora] sync =
    "adapter"``): the engine then receives ``update_adapter`` calls, never ``update_weights``
    (:class:`~grpo_run.TakesAdapters`). ``None``: full weights."""


@attrs.frozen
class MemoryRequest:
    """What a component is told when a memory plan asks what it will hold (:class:`~grpo_run.PlansMemory`).

    Sizes are the run's model and rollout batch as the plan sees them, before anything is loaded."""

    params: int
    """Parameters of the run's model (shared ones once)."""
    param_bytes: int
    """Bytes per parameter in ``model.dtype``."""
    layers: int
    kv_dim: int
    """Key (and value) width per token and layer: key-value heads x head size."""
    vocab: int
    sequences: int
    """Sequences of one rollout batch (prompts x samples per prompt); in a sweep, every variant's
    (the engine generates them together)."""
    prompt_tokens: int
    """The longest prompt (``data.max_prompt_token_length``)."""
    response_tokens: int
    """The longest completion (``rollout.response_length``)."""
    device: str
    """``"cuda"`` or ``"cpu"``: where the run's model lives."""
    device_bytes: int | None = None
    """Memory of one device of that kind (``None`` on the CPU)."""
    hidden: int = 0
    """The model's hidden size."""
    context: int | None = None
    """The model's context (``max_position_embeddings``; ``None``: not said)."""
    engines: int = 1
    """Engines of the run (``engine.num_engines``): each generates its share of a batch."""
    overlaps_learner: bool = False
    """Generation runs beside learner steps (``rollout.async_steps > 1``)."""
    adapter_params: int = 0
    """A LoRA run that syncs its adapter (``model.lora.sync``): the adapter's parameters, which the
    engine holds beside its copy of the base model (a sweep's: every variant's adapter together);
    0 when it receives whole weights."""


@attrs.frozen
class MemoryPart:
    """One part of a component's memory in a plan."""

    name: str
    bytes: float
    note: str = ""
    """How it was counted, in a few words (``"135M params x 4 bytes"``)."""
    transient: bool = False
    """Held only while the component works (a KV cache while generating), not all along."""
    own_process: bool = False
    """In a process of the component's own (a vLLM worker, a reward model's scoring worker), not
    the trainer's; on a CUDA device it still takes that device's memory."""
    device: str = ""
    """Where it lives: ``"cpu"``, ``"cuda:<i>"``, or ``""`` where the run places the component (the
    model's device; with Ray, a component that asks for GPUs gets its own)."""
    spread: int = 1
    """GPUs the part spans, each holding ``bytes`` (tensor parallelism): ``device`` and the next ones."""
    reserved: bool = False
    """A share of the device the component takes by its own rule, its own margin included (vLLM's
    ``gpu_memory_utilization``): a GPU holding only such parts needs no margin beyond them."""
    problem: str = ""
    """Why the component cannot start or run as configured with this part (vLLM: its weights do not
    fit the share it reserves); a plan with a problem does not fit, and says it."""


SOLVED_TOLERANCE = 1e-6
"""Rewards are sums of weighted floats (``0.7 + 0.3``): "reached the maximum" allows this much,
relative to ``max(1, |maximum|)``."""


def reaches(value: float, top: float) -> bool:
    """Whether ``value`` is at ``top`` (or above), within :data:`SOLVED_TOLERANCE`."""
    return value >= top - SOLVED_TOLERANCE * max(1.0, abs(top))


def is_solved(reward: float, max_reward: float) -> bool:
    """Whether a reward reached the most the row can score, and that maximum is positive (a row
    nothing can reward is never solved).

    "Solved" in eval accuracy, ``reward/solve_rate`` and the ``active`` sampler's pass rates asks
    the task's correctness verifiers (``scoring.correctness_verifiers``); this whole-reward test
    is what decides for rows only all-rows verifiers score, and for every row with
    ``correctness_verifiers = "reward"``.
    """
    return max_reward > 0 and reaches(reward, max_reward)
