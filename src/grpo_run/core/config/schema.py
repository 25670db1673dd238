"""The typed run configuration: one frozen ``attrs`` tree, structured from TOML by
:mod:`grpo_run.core.config.converter`.

Fixed sections are plain attrs classes here. Plugin slots (``loss``, ``kl``, ``sampler``,
``engine``, ``task``, ``verifiers.<name>``, ``trackers.<name>``) hold the chosen component's
name and an instance of that component's own ``Config`` class.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import attrs
from attrs import validators as v

from grpo_run.core.config.data_sections import DataSection
from grpo_run.core.config.environment import EnvironmentSlot
from grpo_run.core.config.processes import DistributedSection, LearnerSection
from grpo_run.core.config.slots import EngineSlot, KLSlot, PluginSlot
from grpo_run.core.config.validators import non_negative, positive
from grpo_run.core.plugins.types import REWARD_LIMIT


def _unit_interval(_inst: Any, attribute: attrs.Attribute, value: float) -> None:
    if not 0.0 < value <= 1.0:
        raise ValueError(f"{attribute.name} must be in (0, 1], got {value}")


@attrs.frozen
class RunSection:
    name: str = "grpo"
    """Run name: the run directory is ``<output_dir>/<name>`` unless ``--output-dir`` is given."""
    output_dir: str = "runs"
    """Parent directory of run directories."""
    seed: int = 1
    """Seeds Python's and torch's generators, the sampler and the engine's sampling."""


_DEVICE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def _device_name(_inst: Any, _attribute: attrs.Attribute, value: str) -> None:
    if not _DEVICE.match(value):
        raise ValueError(f"must be 'auto', 'cpu', 'cuda' or 'cuda:<index>', got {value!r}")


@attrs.frozen
class LoraSection:
    """LoRA adapters (through ``peft``, the ``grpo-run[peft]`` extra): only the adapters train.

    The table ``[model.lora]`` turns LoRA on. The reference policy is the base model with the
    adapters disabled (no second copy of the weights); engines receive the adapter at every sync
    (or the merged weights: ``sync``); checkpoints hold the adapter (``adapter_config.json``,
    ``adapter_model.safetensors``, loadable with ``peft.PeftModel.from_pretrained``) and, with
    ``save_merged``, the merged model.
    """

    r: int = attrs.field(default=16, validator=positive)
    """Rank of the adapter matrices."""
    alpha: float = attrs.field(default=32.0, validator=v.gt(0.0))
    """Scale numerator: the update is ``(alpha / r) * B @ A`` (``alpha / sqrt(r)`` with ``use_rslora``)."""
    dropout: float = attrs.field(default=0.0, validator=[non_negative, v.lt(1.0)])
    """Dropout on the adapter's input."""
    target_modules: Literal["all-linear"] | tuple[str, ...] = "all-linear"
    """Module names (or name suffixes) that get adapters, e.g. ``["q_proj", "v_proj"]``;
    ``"all-linear"``: every linear layer but the output head."""
    modules_to_save: tuple[str, ...] = ()
    """Modules trained in full next to the adapters (saved with them), e.g. ``["lm_head"]``."""
    layers_to_transform: tuple[int, ...] = ()
    """Only these layer indices get adapters (empty: all layers)."""
    use_rslora: bool = False
    """Rank-stabilised scaling ``alpha / sqrt(r)`` instead of ``alpha / r``."""
    use_dora: bool = False
    """Weight-decomposed LoRA (DoRA): a trained magnitude per output feature on top of the adapter."""
    init: Literal["default", "gaussian"] = "default"
    """Initialisation of ``A`` (``B`` starts at zero either way, so the first policy is the base model)."""
    save_merged: bool = False
    """Also write the merged model (Hugging Face format) to ``merged/`` in every checkpoint."""
    sync: Literal["adapter", "merged"] | None = None
    """What engines receive at each weight sync: ``"adapter"``, the adapter's own tensors (they
    keep the base model and swap the adapter in place); ``"merged"``, the whole model with the
    adapter merged in. Unset: ``"adapter"`` where the engine can serve this adapter (``vllm``
    cannot serve DoRA or ``modules_to_save``), else ``"merged"``, and the run says why."""


@attrs.frozen
class ModelSection:
    name_or_path: str = "tiny-arithmetic"
    """A registered model name (``grpo-run plugins``), a local directory or a Hugging Face id."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """The dtype the weights (and the optimizer's master copy) are stored in. ``"bfloat16"`` with
    ``autocast = "none"`` is pure bf16 training; for bf16 compute with fp32 master weights keep
    ``"float32"`` and set ``autocast = "bfloat16"``."""
    attn_implementation: Literal["sdpa", "eager"] = "sdpa"
    """transformers' attention kernel for the learner and the ``hf`` engine."""
    device: str = attrs.field(default="auto", validator=_device_name)
    """``"auto"`` (CUDA when available, else the CPU), ``"cpu"``, ``"cuda"`` or ``"cuda:<i>"``."""
    revision: str | None = None
    """A branch, tag or commit of a Hugging Face model id (unset: the default branch)."""
    trust_remote_code: bool = False
    """Allow a hub model's own Python code to run (transformers' ``trust_remote_code``)."""
    gradient_checkpointing: Literal["auto"] | bool = "auto"
    """Recompute activations in the backward pass instead of storing them: a forward's activation
    memory drops to about one layer's, for ~30% more learner compute. ``"auto"``: on for a CUDA
    model (where memory, not compute, bounds the batch), off on the CPU (where it only costs)."""
    autocast: Literal["none", "bfloat16"] = attrs.field(default="none")
    """Mixed precision: learner forwards run under ``torch.autocast`` in this dtype while the
    weights, gradients and optimizer state stay in ``dtype`` (which must be ``"float32"``)."""
    lora: LoraSection | None = None
    """``[model.lora]``: train LoRA adapters instead of every weight (absent: full fine-tuning)."""

    @autocast.validator
    def _autocast_needs_fp32_weights(self, _attribute: attrs.Attribute, value: str) -> None:
        if value != "none" and self.dtype != "float32":
            raise ValueError(
                f"autocast = {value!r} keeps fp32 master weights and needs dtype = 'float32', got "
                f"dtype = {self.dtype!r} (for pure {self.dtype} training set autocast = 'none')"
            )


@attrs.frozen
class RolloutSection:
    num_unique_prompts_rollout: int = attrs.field(default=16, validator=positive)
    """Prompts per rollout batch (one learner step); the batch holds this x ``num_samples_per_prompt_rollout`` completions."""
    num_samples_per_prompt_rollout: int = attrs.field(default=8, validator=positive)
    """G: completions sampled per prompt."""
    response_length: int = attrs.field(default=32, validator=positive)
    """Maximum new tokens per completion."""
    temperature: float = attrs.field(default=1.0, validator=v.gt(0.0))
    """Sampling temperature; the learner computes log-probs under the same temperature."""
    top_p: float = attrs.field(default=1.0, validator=_unit_interval)
    """Nucleus sampling: sample from the smallest token set whose probability reaches this (1 = off)."""
    stop_strings: tuple[str, ...] = ()
    """Generation of a completion stops after any of these strings (besides the EOS token)."""
    async_steps: int = attrs.field(default=1, validator=positive)
    """Rollout batches that may be generated ahead of the learner; 1 = synchronous."""


def _number_in_text(value: Any) -> Any:
    """``"1024"`` -> ``1024.0`` (Open Instruct writes a constant denominator as text); numbers and
    ``"token"`` as they are."""
    if isinstance(value, str) and value != "token":
        try:
            return float(value)
        except ValueError:
            raise ValueError(f"expected 'token' or a number (as text too: \"1024\"), got string {value!r}") from None
    return value


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
    """Drop groups without a reward spread (rewards equal up to float rounding: no learning
    signal; docs/algorithms.md). Such groups get zero advantages either way."""
    pack_length: int = attrs.field(default=512, validator=positive)
    """Tokens per packed learner row."""
    share_prompts: bool = True
    """In the learner forward, compute a prompt that several sequences of a mini-batch start with
    (a group's samples) once: each completion attends to that one copy, and the gradients of all of
    them flow into it. The loss and gradients are those of one prompt copy per sequence (up to
    float rounding), with fewer tokens through the layers: 8 samples of 8-24-token prompts and 32
    completion tokens, 36% fewer. Needs the varlen attention path (models without it compute every
    copy); with dropout active in the model, the sequences share one dropout draw over the prompt."""
    loss_aggregation: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"] = "token-mean"
    """How per-token losses become one number, for every loss: ``token-mean`` (every loss token of
    the rollout batch weighs the same), ``seq-mean-token-mean`` (mean per sequence, then over
    sequences), ``seq-mean-token-sum`` (sum per sequence, mean over sequences)."""
    loss_denominator: Literal["token"] | float | str = attrs.field(default="token", converter=_number_in_text)
    """``"token"``: divide by the token count the aggregation mode implies; a positive number C
    (also written as text, Open Instruct's ``"1024"``):
    divide by C instead (``token-mean``: sum of all loss tokens / C; ``seq-mean-token-mean``:
    each sequence's sum / C, mean over sequences). Like the token count it replaces, C covers the
    whole rollout batch: every mini-batch and rank. Not with ``seq-mean-token-sum``."""
    mask_truncated_completions: bool = False
    """Completions cut at ``response_length`` (finish reason ``length``) get no loss."""
    num_mini_batches: int = attrs.field(default=1, validator=positive)
    """Optimizer steps per epoch over the rollout batch (PPO mini-batches)."""
    num_epochs: int = attrs.field(default=1, validator=positive)
    """Passes over the rollout batch; pi_old stays the policy that started the step."""
    advantage_eps: float = attrs.field(default=1e-6, validator=v.gt(0.0))
    """Added to the group's standard deviation before dividing (``"standard"`` normalisation)."""
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
    """Peak learning rate of AdamW."""
    weight_decay: float = attrs.field(default=0.0, validator=non_negative)
    """AdamW's decoupled weight decay."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW's moment decay rates."""
    eps: float = attrs.field(default=1e-8, validator=v.gt(0.0))
    """AdamW's denominator epsilon."""
    warmup_steps: int = attrs.field(default=0, validator=non_negative)
    """Learner steps of linear warm-up from 0 to ``lr``."""
    lr_scheduler: Literal["constant", "linear", "cosine"] = "constant"
    """Schedule after warm-up; ``linear``/``cosine`` decay to zero at ``train.total_steps``."""
    max_grad_norm: float = attrs.field(default=1.0, validator=v.gt(0.0))
    """Gradients are clipped to this global L2 norm before every optimizer step."""


@attrs.frozen
class TrainSection:
    total_steps: int = attrs.field(default=100, validator=positive)
    """Learner steps (rollout batches) to train for."""
    local_eval_every: int = attrs.field(default=10, validator=non_negative)
    """Evaluate (greedy) every this many steps, and before the first and after the last; 0 = never.
    A config without eval rows (no ``[[data.eval]]``, no ``[task]``) runs without evaluations at
    the default; another value there is an error."""
    max_runtime_s: float = attrs.field(default=0.0, validator=non_negative)
    """Seconds the training loop may run, evaluations included (counted from the first
    evaluation; loading the model is not); 0 = no limit. When it runs out, generation and
    evaluation in progress are abandoned, a learner step in progress finishes, and the run saves
    its checkpoint and stops (no final evaluation; the console says what was cut)."""
    stop_at_eval_accuracy: float = attrs.field(default=0.0, validator=v.and_(v.ge(0.0), v.le(1.0)))
    """Stop once ``eval/accuracy`` reaches this value; 0 = never."""
    num_threads: int = attrs.field(default=0, validator=non_negative)
    """torch intra-op threads; 0 = torch's default."""
    max_loop_hold_s: float = attrs.field(default=120.0, validator=non_negative)
    """Seconds an environment's or an async verifier's ``async def`` may hold the event loop
    without awaiting (a blocking call inside it) before the run stops by itself: nothing else runs
    meanwhile and such a call cannot be cancelled. Also the most all such holds (each of 0.5 s or
    more) may add up to between two training steps. The run saves the last finished step when the
    learner is idle, as after SIGTERM, names what held the loop and exits with 1; 0 = never."""


_REPO_ID = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*/)?[A-Za-z0-9][A-Za-z0-9._-]*$")


def _repo_id(_inst: Any, _attribute: attrs.Attribute, value: str) -> None:
    if not _REPO_ID.match(value) or len(value) > 96:
        raise ValueError(f"must be a Hugging Face repo id such as 'my-org/my-model', got {value!r}")


@attrs.frozen
class HubPushSection:
    """``[checkpoint.push_to_hub]``: upload checkpoints to a Hugging Face Hub model repository.

    Uploads run in a background thread while training goes on, one at a time, each checkpoint as
    one commit ("grpo-run step <n>") at the root of the repository, so the repository always
    holds the newest pushed model. The token is huggingface_hub's own (``HF_TOKEN`` or
    ``hf auth login``). A failed upload is a warning: training continues and the local
    checkpoint is kept.
    """

    repo_id: str = attrs.field(validator=_repo_id)
    """The repository, ``"<user or org>/<name>"``; created (with ``private``) if it does not exist."""
    private: bool = True
    """Create the repository as private (an existing repository keeps its visibility)."""
    every_n_saves: int = attrs.field(default=1, validator=positive)
    """Push every this many saved checkpoints; the final checkpoint of a completed run is always pushed."""
    include_trainer_state: bool = False
    """Also upload ``trainer_state.pt`` (optimizer, sampler and RNG state: what ``--resume`` needs;
    about twice the model's size)."""
    endpoint: str | None = None
    """The Hub's URL (default: ``HF_ENDPOINT`` or https://huggingface.co); for a self-hosted mirror."""
    wait_timeout_s: float = attrs.field(default=1800.0, validator=v.gt(0.0))
    """When the run ends, wait at most this long for uploads still running, then give up with a warning."""


@attrs.frozen
class CheckpointSection:
    save_freq: int = attrs.field(default=0, validator=non_negative)
    """Save a checkpoint every this many steps (0 = only at the end)."""
    save_final: bool = True
    """Save a checkpoint when the run completes (or stops early); an interrupted run always saves."""
    dir: str | None = None
    """Where checkpoints go (``step_<n>/`` and ``latest``); default ``<run_dir>/checkpoints``."""
    push_to_hub: HubPushSection | None = None
    """``[checkpoint.push_to_hub]``: also upload checkpoints to the Hugging Face Hub (absent: local only)."""
    keep_last_n: int = attrs.field(default=0, validator=non_negative)
    """Keep only the newest this many checkpoints (older ones are deleted after each save); 0 = keep all."""


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
    verification_reward: float = attrs.field(default=1.0, validator=[v.gt(0.0), v.le(REWARD_LIMIT)])
    """Multiplies every row's combined reward ``sum(weight x score)`` and its maximum; a failed
    gate's ``gate_fail_reward`` is not scaled. ``max_possible_score`` (logged once at start) is
    ``verification_reward x`` the best that one verifier plus every all-rows verifier can add. At most
    1e6, as each verifier's ``weight x score_range`` is (no sum of rewards can overflow)."""
    max_error_rate: float = attrs.field(default=0.5, validator=[v.ge(0.0), v.le(1.0)])
    """Stop the run (with an error naming the verifier) when errors plus timeouts exceed this
    share of a verifier's last ``error_window`` calls; 1.0 disables the check."""
    error_window: int = attrs.field(default=200, validator=positive)
    """Calls per verifier over which ``max_error_rate`` is measured (a sliding window)."""
    error_min_calls: int = attrs.field(default=50, validator=[positive, _at_most_error_window])
    """Calls a verifier must have had before ``max_error_rate`` can stop the run."""
    max_logged_errors: int = attrs.field(default=5, validator=non_negative)
    """Failed calls logged (with the row id) per verifier; every failure is counted in the metrics."""
    max_consecutive_timeouts: int = attrs.field(default=3, validator=non_negative)
    """Stop the run at once when a verifier's calls on this many different rows in a row timed
    out (several samples of one row count once; a call that returns ends the streak): a hung
    verifier stops the run after about this many x (``timeout_s`` + starting a new worker) instead
    of ``error_min_calls`` x ``timeout_s`` (calls take the rows in turns, so the first timeouts
    fall on different rows). 0 disables the check."""
    max_calls_per_worker: int = attrs.field(default=0, validator=non_negative)
    """Replace a scoring worker process after it served this many calls; 0 = never."""
    max_worker_rss_mb: float = attrs.field(default=0.0, validator=non_negative)
    """Replace a scoring worker process whose resident memory is above this many MiB after a
    chunk of calls (a leaking verifier); 0 = never."""
    row_verifiers: bool = True
    """Score each row with the verifiers its ``verifier`` column names. False: that column is
    plain data, and only the verifiers that score every row (``all_rows``: plain reward functions,
    ``format``, ...) give rewards. ``grpo_run.train(reward_funcs=...)`` sets it to false when the
    config enables no verifier of its own."""
    correctness_verifiers: Literal["auto", "reward"] | tuple[str, ...] = "auto"
    """Which verifiers decide whether a completion is *solved*: ``eval/accuracy``,
    ``reward/solve_rate``, the ``active`` sampler's pass rate and ``train.stop_at_eval_accuracy``
    count those. ``"auto"``: the verifiers that check an answer, i.e. those a row names (not the
    ones that score every row, such as ``format``, ``length`` or a reward model): solved when
    each of them that scored the row reached the top of its score range (a format reward beside
    ``math`` then leaves accuracy as ``math`` says); rows no such verifier scores (only
    ``all_rows`` ones, as with plain reward functions) are solved when their whole reward
    reaches its maximum. ``"reward"``: the whole reward reaches the most the row can score. A
    list of verifier names (e.g. ``["math"]``): each of those that scored the row reached its
    top; a row none of them scores is never solved."""


@attrs.frozen
class LoggingSection:
    level: Literal["debug", "info", "warning", "error"] = "info"
    """Lowest level written to ``log.jsonl``."""
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
    report_waits_s: float = attrs.field(default=30.0, validator=v.ge(0.0))
    """When nothing in the loop has moved for this many seconds, print what it is waiting for
    (the batches being generated, scored or trained on and for how long, a weight sync, an
    evaluation), and again every this many seconds while it waits; 0 = never."""


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
    engine: EngineSlot = attrs.Factory(lambda: EngineSlot("hf"))
    verifiers: dict[str, Any] = attrs.Factory(dict)
    """Enabled verifiers: name -> that verifier's structured ``Config``."""
    trackers: dict[str, Any] = attrs.Factory(dict)
    """Enabled trackers besides the always-on ``jsonl``: name -> structured ``Config``."""
    learner: LearnerSection = attrs.Factory(LearnerSection)
    distributed: DistributedSection = attrs.Factory(DistributedSection)
    environment: EnvironmentSlot | None = None
    """Multi-turn episodes (docs/environments.md); ``None``: single-turn completions."""
    renderer: PluginSlot | None = None
    """The chat format of episodes (needed with ``environment``)."""
    tools: dict[str, Any] = attrs.Factory(dict)
    """Enabled tools: name -> structured ``Config``; environments receive them by name."""
