"""The options of the ``reward_model`` verifier (:class:`RewardModelConfig`) and what they imply
for the scorer: the score range, the batch size, a worker of its own, the rescaler and the run's
defaults."""

from __future__ import annotations

import re
import string
from typing import Any, Literal

import attrs

from grpo_run import REWARD_LIMIT, ConfigIssue, RunConfig, ShapingVerifierConfig, check_reward_interval
from grpo_run.plugins.verifiers.reward_model_files import KEY, local_problem
from grpo_run.plugins.verifiers.reward_model_scaling import RewardRescaler

TEMPLATE_FIELDS = ("prompt", "completion")
_DEVICE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")
BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def _check_template(_inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is None:
        return
    try:
        names = {field for _, field, _, _ in string.Formatter().parse(value) if field is not None}
        value.format(prompt="", completion="")
    except (ValueError, IndexError, KeyError) as exc:
        raise ValueError(f"{attribute.name} is not a valid template ({exc}); write a literal brace as "
                         "'{{' or '}}'") from None
    unknown = sorted(names - set(TEMPLATE_FIELDS))
    if unknown:
        raise ValueError(f"{attribute.name} has unknown placeholder(s) {', '.join(unknown)}; allowed: "
                         "{prompt}, {completion}")
    if "completion" not in names:
        raise ValueError(f"{attribute.name} must contain {{completion}}, or the reward model never sees it")


def _check_device(_inst: Any, attribute: attrs.Attribute, value: str) -> None:
    if not _DEVICE.match(value):
        raise ValueError(f'{attribute.name} must be "auto", "cpu", "cuda" or "cuda:<i>", got {value!r}')


def _check_model(_inst: Any, attribute: attrs.Attribute, value: str) -> None:
    if not value.strip():
        raise ValueError(f"{attribute.name} must name a hub id or a local directory")


@attrs.frozen
class RewardModelConfig(ShapingVerifierConfig):
    """Options of the ``reward_model`` verifier (docs/verifiers.md#reward_model-a-trained-reward-model)."""

    model: str = attrs.field(kw_only=True, validator=_check_model)
    """The reward model: a Hugging Face id or a local directory, loaded with
    ``AutoModelForSequenceClassification``; it must have exactly one label."""
    template: str | None = attrs.field(default=None, kw_only=True, validator=_check_template)
    """How prompt and completion become the text it scores, e.g. ``"Question: {prompt}\\nAnswer:
    {completion}"`` (``{prompt}``: the row's prompt, or the last user message of a chat). Unset: the
    reward model's own chat template (a user turn and the completion as the assistant's), or without
    one the prompt followed by the completion."""
    batch_size: int = attrs.field(default=64, kw_only=True, validator=attrs.validators.gt(0))
    """Completions per forward; the scorer sends batches of at most this many."""
    max_length: int = attrs.field(default=1024, kw_only=True, validator=attrs.validators.gt(0))
    """Tokens per scored text; longer texts lose tokens from the left (the start of the prompt),
    counted in ``verifier/reward_model/truncated`` (share of texts) and ``truncated_tokens``."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = attrs.field(default="auto", kw_only=True)
    """The weights' dtype; ``"auto"``: the run's ``model.dtype`` (float32 outside a run)."""
    device: str = attrs.field(default="auto", kw_only=True, validator=_check_device)
    """Where the model runs: ``"cpu"``, ``"cuda"``, ``"cuda:<i>"`` (e.g. a GPU beside the learner's);
    ``"auto"``: the run's ``model.device`` (CUDA when the scoring worker sees a GPU, else the CPU)."""
    transform: Literal["none", "sigmoid", "standardize"] = attrs.field(default="none", kw_only=True)
    """From raw score to score: ``"none"`` (the logit), ``"sigmoid"`` (into (0, 1)) or
    ``"standardize"`` (running mean and deviation of the run's raw scores, kept in checkpoints)."""
    clip: tuple[float, float] | None = attrs.field(default=None, kw_only=True, validator=check_reward_interval)
    """``[low, high]``: scores are clamped into it after the transform, and it is the score range
    (its top counts as solved). Unset: ``[0, 1]`` with ``"sigmoid"``, else any score with
    ``|weight x score| <= 1e6`` (a larger one is a failed call)."""
    num_cpus: float = attrs.field(default=1.0, kw_only=True, validator=attrs.validators.ge(0.0))
    """``distributed.backend = "ray"``: CPUs its Ray actor asks for."""
    num_gpus: float = attrs.field(default=0.0, kw_only=True, validator=attrs.validators.ge(0.0))
    """``distributed.backend = "ray"``: GPUs its Ray actor asks for (the model then sees them as ``cuda``)."""
    revision: str | None = attrs.field(default=None, kw_only=True)
    """A branch, tag or commit of a hub id."""
    trust_remote_code: bool = attrs.field(default=False, kw_only=True)
    """Allow the hub model's own Python code to run."""

    @property
    def score_range(self) -> tuple[float, float]:
        if self.clip is not None:
            return (float(self.clip[0]), float(self.clip[1]))
        if self.transform == "sigmoid":
            return (0.0, 1.0)
        bound = REWARD_LIMIT / max(self.weight, 1.0)
        return (-bound, bound)

    @property
    def max_batch_size(self) -> int:
        return self.batch_size

    @property
    def worker_resources(self) -> dict[str, float]:
        return {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus}

    def rescaler(self) -> RewardRescaler:
        return RewardRescaler(self.transform, self.clip)

    def with_run(self, run: RunConfig) -> RewardModelConfig:
        dtype = run.model.dtype if self.dtype == "auto" else self.dtype
        device = run.model.device if self.device == "auto" else self.device
        return attrs.evolve(self, dtype=dtype, device=device)

    def check_run(self, run: RunConfig) -> list[ConfigIssue]:
        problem = local_problem(self.model)
        return [ConfigIssue(f"{KEY}.model", f"{self.model!r}: {problem}")] if problem else []
