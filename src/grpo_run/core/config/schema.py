"""The typed run configuration: one frozen ``attrs`` tree, structured from TOML by
:mod:`grpo_run.core.config.converter`.

Fixed sections are plain attrs classes here. Plugin slots (``loss``, ``kl``, ``sampler``,
``engine``, ``task``, ``verifiers.<name>``, ``trackers.<name>``) hold the chosen component's
name and an instance of that component's own ``Config`` class.
"""

from __future__ import annotations

import re
from pathlib import PurePath
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
    """The KL estimator (a registered ``kl`` component)."""
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
    adapters disabled (no second copy of the weights); engines receive the merged weights at every
    sync; checkpoints hold the adapter (``adapter_config.json``, ``adapter_model.safetensors``,
    loadable with ``peft.PeftModel.from_pretrained``) and, with ``save_merged``, the merged model.
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
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass instead of storing them (less memory, ~30% more compute)."""
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
class TransformSlot(PluginSlot):
    """A row transform chosen by a data source: ``transform = "gsm8k"`` or
    ``transform = {name = "boxed", ...options}``; ``config`` is the transform's own ``Config``."""


def _positive_or_none(_inst: Any, attribute: attrs.Attribute, value: float | None) -> None:
    if value is not None and not value > 0:
        raise ValueError(f"must be > 0, got {value}")


@attrs.frozen
class DataSource:
    """One source of prompt rows (an entry of ``data.train`` or ``data.eval``): where the rows
    are, how many to take, and which of their columns hold the prompt, the ground truth and the
    verifier. See docs/data.md."""

    path: str | None = None
    """A local file (``.jsonl``, ``.json``, ``.parquet``, ``.csv``) or a directory written by
    ``datasets``' ``save_to_disk``."""
    hf_dataset: str | None = None
    """A Hugging Face hub dataset id (``"openai/gsm8k"``); needs the hub or its local cache."""
    subset: str | None = None
    """The hub dataset's configuration name (``"main"``)."""
    split: str | None = None
    """Split of ``hf_dataset`` (default ``"train"``) or of a saved ``DatasetDict`` directory."""
    format: Literal["auto", "jsonl", "json", "parquet", "csv"] = "auto"
    """File format of ``path``; ``"auto"`` goes by the file's extension."""
    name: str | None = None
    """The rows' ``dataset`` value (what the ``mixture`` sampler weighs); default: the file's
    stem, the directory's name or the hub id."""
    weight: float | None = attrs.field(default=None, validator=_positive_or_none)
    """How much of the source to use: ``round(weight x rows)`` rows, a seeded sample below 1, every
    row repeated (then a sample of the rest) above 1. Default 1: every row once."""
    rows: int | None = attrs.field(default=None, validator=v.optional(positive))
    """Use exactly this many rows (a seeded sample, or repeats when the source has fewer)."""
    prompt_key: str | None = None
    """Column holding the prompt as plain text (default: ``prompt``, unless the row has ``messages``)."""
    messages_key: str | None = None
    """Column holding the prompt as a chat, a list of ``{role, content}`` (default: ``messages``)."""
    ground_truth_key: str = "ground_truth"
    """Column holding the ground truth the verifier compares against."""
    verifier: str | None = None
    """Verifier for rows without a ``verifier_key`` column (typically the whole source)."""
    verifier_key: str = "verifier"
    """Column naming each row's verifier (a name or a list of names)."""
    id_key: str = "id"
    """Column holding a row id; rows without one get ``<name>-<index>``."""
    system_prompt: str | None = None
    """A system message put before every prompt (a chat that starts with one keeps its own)."""
    transform: TransformSlot | None = None
    """A row transform (plugin family ``transform``), applied after the columns are mapped:
    ``"gsm8k"`` (``... #### 72`` -> ``72``), ``"boxed"`` (a MATH solution -> its last ``\\boxed{}``)."""

    def __attrs_post_init__(self) -> None:
        if (self.path is None) == (self.hf_dataset is None):
            raise ValueError("a data source needs exactly one of 'path' and 'hf_dataset'")
        if self.weight is not None and self.rows is not None:
            raise ValueError("give a data source 'weight' or 'rows', not both")
        if self.prompt_key is not None and self.messages_key is not None:
            raise ValueError("give a data source 'prompt_key' or 'messages_key', not both")
        if self.subset is not None and self.hf_dataset is None:
            raise ValueError("'subset' names a configuration of 'hf_dataset'; it needs one")
        if self.format != "auto" and self.path is None:
            raise ValueError("'format' is the file format of 'path'; it needs one")

    @property
    def label(self) -> str:
        """The rows' ``dataset`` value."""
        if self.name is not None:
            return self.name
        if self.hf_dataset is not None:
            return self.hf_dataset
        assert self.path is not None
        p = PurePath(self.path)
        return p.stem if p.suffix else p.name


@attrs.frozen
class DataSection:
    train: tuple[DataSource, ...] = ()
    """Training sources (``[[data.train]]`` tables), mixed into one set of rows in this order."""
    eval: tuple[DataSource, ...] = ()
    """Evaluation sources (``[[data.eval]]``), the same way; not with a ``[task]``, which has its own."""
    seed: int = 1
    """Seed of the sampling that ``weight`` / ``rows`` do."""
    apply_chat_template: bool = True
    """Feed ``prompt`` columns through the tokenizer's chat template (as one user message, after
    the ``system_prompt`` if any). False: the prompt text is tokenised as it is, and ``messages``
    rows are an error. A model without a chat template needs false."""
    max_prompt_token_length: int = attrs.field(default=256, validator=positive)
    """Prompts longer than this (in tokens, after the chat template) are dropped with a warning."""


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
    """Evaluate (greedy) every this many steps, and before the first and after the last; 0 = never."""
    max_runtime_s: float = attrs.field(default=0.0, validator=non_negative)
    """Stop (cleanly, with a final eval and save) after this many seconds; 0 = no limit."""
    stop_at_eval_accuracy: float = attrs.field(default=0.0, validator=v.and_(v.ge(0.0), v.le(1.0)))
    """Stop once ``eval/accuracy`` reaches this value; 0 = never."""
    num_threads: int = attrs.field(default=0, validator=non_negative)
    """torch intra-op threads; 0 = torch's default."""


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
    max_consecutive_timeouts: int = attrs.field(default=3, validator=non_negative)
    """Stop the run at once when a verifier's calls on this many different rows in a row timed
    out (several samples of one row count once; a call that returns ends the streak): a hung
    verifier stops the run after about this many x ``timeout_s`` instead of ``error_min_calls`` x
    ``timeout_s``. 0 disables the check."""
    max_calls_per_worker: int = attrs.field(default=0, validator=non_negative)
    """Replace a scoring worker process after it served this many calls; 0 = never."""
    max_worker_rss_mb: float = attrs.field(default=0.0, validator=non_negative)
    """Replace a scoring worker process whose resident memory is above this many MiB after a
    chunk of calls (a leaking verifier); 0 = never."""


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
    """CPUs the actor reserves (Ray's ``num_cpus``)."""
    num_gpus: float = attrs.field(default=0.0, validator=non_negative)
    """GPUs the actor reserves (Ray's ``num_gpus``); a CUDA model needs at least one per actor."""
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
    the cluster could not provide."""

    def resources_of(self, kind: Literal["engine", "learner", "scoring"]) -> ActorResources:
        given = {"engine": self.engine_resources, "learner": self.learner_resources,
                 "scoring": self.scoring_resources}[kind]
        return given if given is not None else ActorResources()


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
