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


@attrs.frozen
class LoggingSection:
    level: Literal["debug", "info", "warning", "error"] = "info"
    progress: bool = True
    """Show the rich progress display (turned off automatically when stdout is not a terminal)."""
    log_rollouts_every: int = attrs.field(default=0, validator=non_negative)
    """Write every completion of the batch to ``rollouts/step_<n>.jsonl`` every this many steps,
    and every evaluation's completions to ``rollouts/eval_<n>.jsonl``; 0 = never."""
    max_rollout_bytes: int = attrs.field(default=8_000_000, validator=positive)
    """Size cap of one ``rollouts/*.jsonl`` file; records past it are left out (and counted in
    ``log.jsonl``)."""
    dashboard_port: int = attrs.field(default=0, validator=v.and_(v.ge(0), v.le(65535)))
    """Serve the live pipeline page on ``http://127.0.0.1:<port>/`` during training (the
    ``grpo-run`` command; localhost only); 0 = off."""


@attrs.frozen
class EvalSection:
    """Evaluation on the held-out prompts, every ``train.local_eval_every`` steps: greedy accuracy,
    and pass@k from ``num_samples`` sampled completions per prompt."""

    num_samples: int = attrs.field(default=0, validator=non_negative)
    """Completions sampled per eval prompt at ``temperature``: logs ``eval/pass@k`` (the unbiased
    estimator of Chen et al. 2021) for every k from 1 to ``num_samples``; 0 = greedy only."""
    temperature: float = attrs.field(default=1.0, validator=v.gt(0.0))
    """Sampling temperature of the pass@k completions."""


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
    eval: EvalSection = attrs.Factory(EvalSection)
    loss: PluginSlot = attrs.Factory(lambda: PluginSlot("dapo"))
    kl: KLSlot = attrs.Factory(KLSlot)
    sampler: PluginSlot = attrs.Factory(lambda: PluginSlot("uniform"))
    engine: PluginSlot = attrs.Factory(lambda: PluginSlot("hf"))
    verifiers: dict[str, Any] = attrs.Factory(dict)
    """Enabled verifiers: name -> that verifier's structured ``Config``."""
    trackers: dict[str, Any] = attrs.Factory(dict)
    """Enabled trackers besides the always-on ``jsonl``: name -> structured ``Config``."""
