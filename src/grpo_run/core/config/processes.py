"""Config sections that say which processes a run uses and where: ``[learner]`` (how many
data-parallel ranks, which strategy) and ``[distributed]`` (in this process and its children, or
as Ray actors with the resources each asks for)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import attrs
from attrs import validators as v

from grpo_run.core.config.validators import non_negative, positive

Strategy = Literal["single", "ddp", "fsdp2", "deepspeed"]


def _budget(_instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value == "auto":
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f'must be "auto" or a number of tokens >= 0 (0: no bound), got {value!r}')


def _default_strategy(section: Any) -> str:
    return "ddp" if section.num_learners > 1 else "single"


@attrs.frozen
class LearnerSection:
    """How the learner is laid out: one process, or ``num_learners`` data-parallel ranks."""

    num_learners: int = attrs.field(default=1, validator=positive)
    """Learner processes (ranks). Each takes a token-balanced share of every mini-batch."""
    strategy: Strategy = attrs.field(default=attrs.Factory(_default_strategy, takes_self=True))
    """``"single"``: one process (default with one learner); ``"ddp"``: torch DistributedDataParallel
    (default with several); ``"fsdp2"``: torch ``fully_shard`` (parameters, gradients and optimizer
    state sharded over ranks); ``"deepspeed"``: DeepSpeed ZeRO (``zero_stage``; needs the
    ``grpo-run[deepspeed]`` extra)."""
    zero_stage: Literal[1, 2, 3] | None = attrs.field(default=None)
    """DeepSpeed ZeRO stage: 1 shards optimizer state, 2 also gradients, 3 also parameters;
    ``strategy = "deepspeed"`` only (default 2 there)."""
    offload_optimizer: bool = attrs.field(default=False)
    """DeepSpeed: keep optimizer state (and its step) on the CPU; needs a GPU model."""
    offload_params: bool = attrs.field(default=False)
    """DeepSpeed ZeRO-3 or fsdp2: keep parameters on the CPU between uses (fsdp2 moves gradients and
    optimizer state with them); needs a GPU model."""
    max_tokens_per_forward: Literal["auto"] | int = attrs.field(default="auto", validator=_budget)
    """The learner's memory bound: tokens per forward and backward of the training pass (per rank).
    A mini-batch with more is split into micro-batches of whole packed rows, whose gradients add
    up to one optimizer step with exactly the loss of one forward over the mini-batch. A row longer
    than this is a micro-batch of its own; 0 = no bound (one forward per mini-batch).
    ``"auto"``: the most that fits, from the memory plan (``grpo-run plan``) and the memory the
    device has free at the start (CUDA: after the engines; CPU: half the memory available),
    logged once. Peers: verl's ``ppo_max_token_len_per_gpu``, NeMo-RL's ``train_mb_tokens``.
    docs/memory.md."""
    max_tokens_per_logprob_forward: Literal["auto"] | int | None = attrs.field(default=None, validator=v.optional(_budget))
    """The same bound for the no-grad passes (the old and the reference policy's log-probs), which
    keep no activations; unset: ``"auto"`` when ``max_tokens_per_forward`` is, else twice it."""
    max_memory_gib: float | None = attrs.field(default=None, validator=v.optional(v.gt(0.0)))
    """The memory an ``"auto"`` budget may plan for in each learner process, in GiB (a shared GPU,
    a laptop that does other work); unset: the plan's share of what the device has."""
    dist_backend: Literal["auto", "gloo", "nccl"] = "auto"
    """torch.distributed backend: ``"auto"`` is NCCL for a CUDA model, gloo otherwise."""
    threads_per_learner: int = attrs.field(default=0, validator=non_negative)
    """torch threads in each learner process (``OMP_NUM_THREADS``); 0 = this machine's cores divided
    by ``num_learners`` (local), or the actor's CPUs (Ray)."""
    collective_timeout_s: float = attrs.field(default=600.0, validator=v.gt(0.0))
    """A collective (all-reduce, gather) waiting longer than this fails instead of hanging."""
    hang_timeout_s: float = attrs.field(default=60.0, validator=v.gt(0.0))
    """Several ranks: a rank that stops sending heartbeats (stopped, frozen), or that sits idle
    outside torch while every other rank waits for it, stops the run after this long, naming it.
    Ranks that compute (a long step) are left to ``collective_timeout_s``."""

    @strategy.validator
    def _one_rank_for_single(self, _attribute: attrs.Attribute, value: str) -> None:
        if value == "single" and self.num_learners > 1:
            raise ValueError(
                f'"single" trains in one process, but num_learners = {self.num_learners}; '
                'choose "ddp", "fsdp2" or "deepspeed"'
            )

    @zero_stage.validator
    def _stage_for_deepspeed(self, _attribute: attrs.Attribute, value: int | None) -> None:
        if value is not None and self.strategy != "deepspeed":
            raise ValueError(f'is a DeepSpeed option; strategy is "{self.strategy}" (set strategy = "deepspeed")')

    @offload_optimizer.validator
    def _optimizer_offload(self, _attribute: attrs.Attribute, value: bool) -> None:
        if value and self.strategy != "deepspeed":
            hint = " (fsdp2 offloads optimizer state with offload_params)" if self.strategy == "fsdp2" else ""
            raise ValueError(f'needs strategy = "deepspeed", got "{self.strategy}"{hint}')

    @offload_params.validator
    def _param_offload(self, _attribute: attrs.Attribute, value: bool) -> None:
        if not value or self.strategy == "fsdp2" or (self.strategy == "deepspeed" and self.stage == 3):
            return
        raise ValueError(
            f'needs strategy = "fsdp2", or "deepspeed" with zero_stage = 3 (got "{self.strategy}"'
            + (f", zero_stage = {self.stage})" if self.strategy == "deepspeed" else ")")
        )

    @property
    def logprob_forward_tokens(self) -> int | str:
        """The no-grad passes' bound as set (0: none; ``"auto"``: from the memory plan)."""
        if self.max_tokens_per_logprob_forward is not None:
            return self.max_tokens_per_logprob_forward
        if self.max_tokens_per_forward == "auto":
            return "auto"
        return 2 * self.max_tokens_per_forward

    @property
    def stage(self) -> int:
        """The ZeRO stage in effect (``zero_stage``, default 2); 0 for other strategies."""
        if self.strategy != "deepspeed":
            return 0
        return self.zero_stage if self.zero_stage is not None else 2


@attrs.frozen
class ActorResources:
    """What one Ray actor asks the cluster for."""

    num_cpus: float = attrs.field(default=1.0, validator=non_negative)
    """CPUs the actor reserves (Ray's ``num_cpus``)."""
    num_gpus: float = attrs.field(default=0.0, validator=non_negative)
    """GPUs the actor reserves (Ray's ``num_gpus``); a CUDA model needs at least one per actor."""
    resources: dict[str, float] = attrs.Factory(dict)
    """Custom Ray resources (``{ "node_type_a" = 1 }``), as given to ``ray start --resources``."""


def actor_resources(given: Mapping[str, float]) -> ActorResources:
    """``{"num_cpus": 1, "num_gpus": 1, "<custom>": 1}`` (a verifier's own worker) as
    :class:`ActorResources`; ``num_cpus`` defaults to 1, ``num_gpus`` to 0."""
    rest = {k: float(v) for k, v in given.items() if k not in ("num_cpus", "num_gpus")}
    return ActorResources(num_cpus=float(given.get("num_cpus", 1.0)), num_gpus=float(given.get("num_gpus", 0.0)),
                          resources=rest)


@attrs.frozen
class DistributedSection:
    """Where the engines and learners run: in this process and its children, or as Ray actors."""

    backend: Literal["local", "ray"] = "local"
    """``"local"``: engines in this process, learner ranks in child processes. ``"ray"``: every
    engine and learner rank is a Ray actor; connects to the cluster at ``RAY_ADDRESS`` or starts
    a local Ray instance."""
    engine_resources: ActorResources | None = None
    """Per engine actor (``backend = "ray"``; default 1 CPU)."""
    learner_resources: ActorResources | None = None
    """Per learner actor (``backend = "ray"``; default 1 CPU)."""
    scoring_actors: int = attrs.field(default=0, validator=non_negative)
    """``backend = "ray"``: run the sync verifiers in this many Ray actors, each with
    ``scoring.num_workers`` worker processes on the node Ray picks (same time limits and
    recycling); 0: worker processes of the driver, on its node."""
    scoring_resources: ActorResources | None = None
    """Per scoring actor (``backend = "ray"``; default 1 CPU). Not part of the placement group."""
    placement_strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] | None = None
    """Reserve every actor's resources up front in one Ray placement group with this strategy
    (one bundle per actor); unset: Ray places each actor on its own."""
    startup_timeout_s: float = attrs.field(default=300.0, validator=v.gt(0.0))
    """Actors (and the placement group) not running within this time fail the run, naming what
    the cluster could not provide. A placement the cluster's nodes can never hold (``STRICT_SPREAD``
    over more actors than nodes, a resource no node has) fails at once, without waiting."""
    join_timeout_s: float = attrs.field(default=30.0, validator=v.gt(0.0))
    """Joining the cluster at ``RAY_ADDRESS``: no answer within this time fails the run in one line
    (Ray itself retries for minutes); its retry messages go to the run's log."""

    def resources_of(self, kind: Literal["engine", "learner", "scoring"]) -> ActorResources:
        given = {"engine": self.engine_resources, "learner": self.learner_resources,
                 "scoring": self.scoring_resources}[kind]
        return given if given is not None else ActorResources()
