"""The typed run configuration: one frozen ``attrs`` tree, structured from TOML by
:mod:`grpo_run.core.config.converter`.

Fixed sections are plain attrs classes here. Plugin slots (``loss``, ``kl``, ``sampler``,
``engine``, ``task``, ``verifiers.<name>``, ``trackers.<name>``) hold the chosen component's
name and an instance of that component's own ``Config`` class.
"""

from __future__ import annotations

from typing import Any, Literal

import attrs
from attrs import validators as v

positive = v.gt(0)
non_negative = v.ge(0)


def _unit_interval(_inst: Any, attribute: attrs.Attribute, value: float) -> None:
    if not 0.0 < value <= 1.0:
        raise ValueError(f"{attribute.name} must be in (0, 1], got {value}")


@attrs.frozen
class PluginSlot:
    """A chosen component: its registered ``name`` and its structured ``Config`` instance."""

    name: str
    config: Any = None


@attrs.frozen
class EngineSlot(PluginSlot):
    """The generation engine: ``name`` and ``num_engines`` are core keys of the ``[engine]`` table;
    every other key configures the chosen engine."""

    num_engines: int = attrs.field(default=1, validator=positive, kw_only=True)
    """Data-parallel engines, each with its own copy of the weights; a rollout batch's prompts are
    split between them. With ``distributed.backend = "local"`` they share this process; with
    ``"ray"`` each is an actor with ``distributed.engine_resources``."""


@attrs.frozen
class KLSlot:
    """The KL estimator, its weight, where the penalty goes and which policy it is measured against.

    ``name``, ``beta``, ``placement``, ``reference``, ``ref_policy_update_freq`` and ``alpha`` are
    core keys of the ``[kl]`` table; every other key configures the chosen estimator.
    """

    name: str = "k3"
    beta: float = attrs.field(default=0.0, validator=non_negative)
    """Weight of the KL term; 0 disables it and no reference model is loaded."""
    placement: Literal["loss", "reward"] = attrs.field(default="loss", kw_only=True)
    """``"loss"``: ``beta`` x the per-token estimate is added to the per-token loss (with grad).
    ``"reward"``: ``beta`` x the sequence's summed estimate under pi_old (detached) is subtracted
    from the sequence's advantage before the loss (after group normalisation)."""
    reference: Literal["none", "frozen", "polyak"] = attrs.field(default="frozen", kw_only=True)
    """``"frozen"``: the initial policy; ``"polyak"``: the initial policy, moved towards the policy
    every ``ref_policy_update_freq`` steps; ``"none"``: no reference (needs ``beta = 0``)."""
    ref_policy_update_freq: int = attrs.field(default=1, validator=positive, kw_only=True)
    """``reference = "polyak"``: update the reference every this many learner steps."""
    alpha: float = attrs.field(default=0.6, validator=[v.gt(0.0), v.le(1.0)], kw_only=True)
    """``reference = "polyak"``: theta_ref <- alpha * theta + (1 - alpha) * theta_ref (Open Instruct's
    default 0.6; 1 copies the policy)."""
    config: Any = None


@attrs.frozen
class RunSection:
    name: str = "grpo"
    """Run name: the run directory is ``<output_dir>/<name>`` unless ``--output-dir`` is given."""
    output_dir: str = "runs"
    seed: int = 1


@attrs.frozen
class ModelSection:
    name_or_path: str = "tiny-arithmetic"
    """A registered model name (``grpo-run plugins``), a local directory or a Hugging Face id."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    attn_implementation: Literal["sdpa", "eager"] = "sdpa"
    device: str = "cpu"
    """``cpu`` or ``cuda[:i]``."""
    revision: str | None = None
    trust_remote_code: bool = False
    gradient_checkpointing: bool = False


@attrs.frozen
class DataSection:
    train_files: tuple[str, ...] = ()
    """Local JSONL or parquet files with ``messages``/``prompt``, ``ground_truth``, ``verifier``."""
    eval_files: tuple[str, ...] = ()
    hf_dataset: str | None = None
    """A Hugging Face dataset id (needs the ``data`` extra)."""
    hf_train_split: str = "train"
    hf_eval_split: str | None = None
    max_prompt_token_length: int = attrs.field(default=256, validator=positive)
    """Prompts longer than this (in tokens, after the chat template) are dropped with a warning."""
    num_eval_prompts: int = attrs.field(default=0, validator=non_negative)
    """Use at most this many eval prompts (0 = all)."""
    default_verifier: str | None = None
    """Verifier for rows that have no ``verifier`` column."""


@attrs.frozen
class RolloutSection:
    num_unique_prompts_rollout: int = attrs.field(default=16, validator=positive)
    num_samples_per_prompt_rollout: int = attrs.field(default=8, validator=positive)
    """G: completions sampled per prompt."""
    response_length: int = attrs.field(default=32, validator=positive)
    """Maximum new tokens per completion."""
    temperature: float = attrs.field(default=1.0, validator=v.gt(0.0))
    top_p: float = attrs.field(default=1.0, validator=_unit_interval)
    stop_strings: tuple[str, ...] = ()
    async_steps: int = attrs.field(default=1, validator=positive)
    """Rollout batches that may be generated ahead of the learner; 1 = synchronous."""


MismatchCorrection = Literal["none", "token-truncate", "token-mask", "sequence-truncate", "sequence-mask"]


@attrs.frozen
class AlgorithmSection:
    advantage_normalization_type: Literal["standard", "centered"] = "standard"
    """``"standard"``: ``(r - mean) / (std + advantage_eps)`` per group; ``"centered"``: ``r - mean``
    (Dr. GRPO)."""
    advantage_std: Literal["sample", "population"] = "sample"
    """Which standard deviation ``"standard"`` divides by: ``"sample"`` (Bessel-corrected, n - 1;
    verl and TRL) or ``"population"`` (n; Open Instruct's numpy ``.std()``)."""
    filter_zero_std_samples: bool = True
    """Drop groups whose rewards are all equal (no learning signal)."""
    pack_length: int = attrs.field(default=512, validator=positive)
    """Tokens per packed learner row."""
    loss_aggregation: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"] = "token-mean"
    """How per-token losses become one number, for every loss: ``token-mean`` (every loss token of
    the rollout batch weighs the same), ``seq-mean-token-mean`` (mean per sequence, then over
    sequences), ``seq-mean-token-sum`` (sum per sequence, mean over sequences)."""
    loss_denominator: Literal["token"] | float = "token"
    """``"token"``: divide by the token count the aggregation mode implies; a positive number C:
    divide by C instead (``token-mean``: sum of all loss tokens / C; ``seq-mean-token-mean``:
    each sequence's sum / C, mean over sequences). Not with ``seq-mean-token-sum``."""
    mask_truncated_completions: bool = False
    num_mini_batches: int = attrs.field(default=1, validator=positive)
    """Optimizer steps per epoch over the rollout batch (PPO mini-batches)."""
    num_epochs: int = attrs.field(default=1, validator=positive)
    """Passes over the rollout batch; pi_old stays the policy that started the step."""
    advantage_eps: float = attrs.field(default=1e-6, validator=v.gt(0.0))
    use_engine_logprobs_as_old: bool = False
    """Take pi_old from the generation engine's log-probs instead of recomputing it with the
    learner (saves a forward; excludes ``mismatch_correction``)."""
    mismatch_correction: MismatchCorrection = "none"
    """Engine/trainer mismatch correction with rho = pi_old(learner) / pi_engine: ``token-*`` per
    token, ``sequence-*`` with the sequence's product of token ratios; ``*-truncate`` weighs the
    loss by min(rho, mismatch_upper), ``*-mask`` drops tokens (sequences) with rho outside
    [mismatch_lower, mismatch_upper]. The weight is detached and multiplies the policy loss."""
    mismatch_upper: float = attrs.field(default=2.0, validator=v.gt(0.0))
    """Truncation cap, and upper bound of the kept range of the mask modes."""
    mismatch_lower: float = attrs.field(default=0.0, validator=non_negative)
    """Lower bound of the kept range of the mask modes (must be < ``mismatch_upper``)."""
    log_entropy: bool = False
    """Log ``policy/entropy``: mean entropy of the policy over loss tokens (costs a softmax per row)."""

    @mismatch_lower.validator
    def _lower_below_upper(self, _attribute: attrs.Attribute, value: float) -> None:
        if value >= self.mismatch_upper:
            raise ValueError(f"must be < mismatch_upper ({self.mismatch_upper}), got {value}")


@attrs.frozen
class OptimSection:
    lr: float = attrs.field(default=1e-4, validator=v.gt(0.0))
    weight_decay: float = attrs.field(default=0.0, validator=non_negative)
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = attrs.field(default=1e-8, validator=v.gt(0.0))
    warmup_steps: int = attrs.field(default=0, validator=non_negative)
    lr_scheduler: Literal["constant", "linear", "cosine"] = "constant"
    """Schedule after warm-up; ``linear``/``cosine`` decay to zero at ``train.total_steps``."""
    max_grad_norm: float = attrs.field(default=1.0, validator=v.gt(0.0))


@attrs.frozen
class TrainSection:
    total_steps: int = attrs.field(default=100, validator=positive)
    local_eval_every: int = attrs.field(default=10, validator=non_negative)
    """Evaluate (greedy) every this many steps, and before the first and after the last; 0 = never."""
    max_runtime_s: float = attrs.field(default=0.0, validator=non_negative)
    """Stop (cleanly, with a final eval and save) after this many seconds; 0 = no limit."""
    stop_at_eval_accuracy: float = attrs.field(default=0.0, validator=v.and_(v.ge(0.0), v.le(1.0)))
    """Stop once ``eval/accuracy`` reaches this value; 0 = never."""
    num_threads: int = attrs.field(default=0, validator=non_negative)
    """torch intra-op threads; 0 = torch's default."""


@attrs.frozen
class CheckpointSection:
    save_freq: int = attrs.field(default=0, validator=non_negative)
    """Save a checkpoint every this many steps (0 = only at the end)."""
    save_final: bool = True
    dir: str | None = None
    """Where checkpoints go (``step_<n>/`` and ``latest``); default ``<run_dir>/checkpoints``."""


def _at_most_error_window(inst: Any, _attribute: attrs.Attribute, value: int) -> None:
    if value > inst.error_window:
        raise ValueError(f"must be <= scoring.error_window ({inst.error_window}), got {value}")


@attrs.frozen
class ScoringSection:
    """The scoring runtime: worker processes, time limits, reward scale and the error-rate stop."""

    num_workers: int = attrs.field(default=1, validator=non_negative)
    """Worker processes for sync verifiers; 0 scores in-process (no timeout enforcement, for
    debugging). Async verifiers (e.g. ``judge``) always run on the training process's event loop."""
    timeout_s: float = attrs.field(default=10.0, validator=v.gt(0.0))
    """Per-call limit; a sync verifier still running then is killed (its worker process is
    replaced), an async one is cancelled, and the row's score from it is 0. A batched call of
    ``n`` completions gets ``n x timeout_s``."""
    verification_reward: float = attrs.field(default=1.0, validator=[v.gt(0.0), v.lt(float("inf"))])
    """Multiplies every row's combined reward ``sum(weight x score)`` and its maximum; a failed
    gate's ``gate_fail_reward`` is not scaled. ``max_possible_score`` (logged once at start) is
    ``verification_reward x`` the best that one verifier plus every all-rows verifier can add."""
    max_error_rate: float = attrs.field(default=0.5, validator=[v.ge(0.0), v.le(1.0)])
    """Stop the run (with an error naming the verifier) when errors plus timeouts exceed this
    share of a verifier's last ``error_window`` calls; 1.0 disables the check."""
    error_window: int = attrs.field(default=200, validator=positive)
    """Calls per verifier over which ``max_error_rate`` is measured (a sliding window)."""
    error_min_calls: int = attrs.field(default=50, validator=[positive, _at_most_error_window])
    """Calls a verifier must have had before ``max_error_rate`` can stop the run."""
    max_logged_errors: int = attrs.field(default=5, validator=non_negative)
    """Failed calls logged (with the row id) per verifier; every failure is counted in the metrics."""


Strategy = Literal["single", "ddp", "fsdp2", "deepspeed"]


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
    dist_backend: Literal["auto", "gloo", "nccl"] = "auto"
    """torch.distributed backend: ``"auto"`` is NCCL for a CUDA model, gloo otherwise."""
    threads_per_learner: int = attrs.field(default=0, validator=non_negative)
    """torch threads in each learner process (``OMP_NUM_THREADS``); 0 = this machine's cores divided
    by ``num_learners`` (local), or the actor's CPUs (Ray)."""
    collective_timeout_s: float = attrs.field(default=600.0, validator=v.gt(0.0))
    """A collective (all-reduce, gather) waiting longer than this fails instead of hanging."""

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
    def stage(self) -> int:
        """The ZeRO stage in effect (``zero_stage``, default 2); 0 for other strategies."""
        if self.strategy != "deepspeed":
            return 0
        return self.zero_stage if self.zero_stage is not None else 2


@attrs.frozen
class ActorResources:
    """What one Ray actor asks the cluster for."""

    num_cpus: float = attrs.field(default=1.0, validator=non_negative)
    num_gpus: float = attrs.field(default=0.0, validator=non_negative)
    resources: dict[str, float] = attrs.Factory(dict)
    """Custom Ray resources (``{ "node_type_a" = 1 }``), as given to ``ray start --resources``."""


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
    placement_strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] | None = None
    """Reserve every actor's resources up front in one Ray placement group with this strategy
    (one bundle per actor); unset: Ray places each actor on its own."""
    startup_timeout_s: float = attrs.field(default=300.0, validator=v.gt(0.0))
    """Actors (and the placement group) not running within this time fail the run, naming what
    the cluster could not provide."""

    def resources_of(self, kind: Literal["engine", "learner"]) -> ActorResources:
        given = self.engine_resources if kind == "engine" else self.learner_resources
        return given if given is not None else ActorResources()


@attrs.frozen
class LoggingSection:
    level: Literal["debug", "info", "warning", "error"] = "info"
    progress: bool = True
    """Show the rich progress display (turned off automatically when stdout is not a terminal)."""


@attrs.frozen
class RunConfig:
    """The whole configuration of a run."""

    run: RunSection = attrs.Factory(RunSection)
    model: ModelSection = attrs.Factory(ModelSection)
    data: DataSection = attrs.Factory(DataSection)
    task: PluginSlot | None = None
    rollout: RolloutSection = attrs.Factory(RolloutSection)
    algorithm: AlgorithmSection = attrs.Factory(AlgorithmSection)
    optim: OptimSection = attrs.Factory(OptimSection)
    train: TrainSection = attrs.Factory(TrainSection)
    checkpoint: CheckpointSection = attrs.Factory(CheckpointSection)
    scoring: ScoringSection = attrs.Factory(ScoringSection)
    logging: LoggingSection = attrs.Factory(LoggingSection)
    loss: PluginSlot = attrs.Factory(lambda: PluginSlot("dapo"))
    kl: KLSlot = attrs.Factory(KLSlot)
    sampler: PluginSlot = attrs.Factory(lambda: PluginSlot("uniform"))
    engine: EngineSlot = attrs.Factory(lambda: EngineSlot("hf"))
    verifiers: dict[str, Any] = attrs.Factory(dict)
    """Enabled verifiers: name -> that verifier's structured ``Config``."""
    trackers: dict[str, Any] = attrs.Factory(dict)
    """Enabled trackers besides the always-on ``jsonl``: name -> structured ``Config``."""
    learner: LearnerSection = attrs.Factory(LearnerSection)
    distributed: DistributedSection = attrs.Factory(DistributedSection)
