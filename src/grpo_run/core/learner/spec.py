"""What a learner needs, as a small picklable spec, and how to build one from it.

:class:`LearnerSpec` holds exactly the learner's settings (algorithm, optimizer, KL, the loss and
KL estimator as ``(class, config)`` pairs, where the weights come from) -- not the whole run
config -- so a learner can be constructed in another process or on another node: pickle the
spec, call :func:`grpo_run.core.learner.learner.build_learner` there.
"""

from __future__ import annotations

from typing import Any

import attrs
import torch

from grpo_run.core.config.schema import AlgorithmSection, KLSlot, LoraSection, OptimSection
from grpo_run.core.errors import UserError
from grpo_run.core.memory.budget import BudgetPlan

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@attrs.frozen
class ComponentSpec:
    """A plugin component to construct: its class and its structured config (both picklable)."""

    cls: type
    config: Any

    def build(self) -> Any:
        return self.cls(self.config)


@attrs.frozen
class ModelSpec:
    """Where the policy's weights come from and how to load them."""

    path: str
    """Local directory or hub id of the starting weights (Hugging Face format)."""
    dtype: str = "float32"
    device: str = "cpu"
    attn_implementation: str = "sdpa"
    revision: str | None = None
    trust_remote_code: bool = False
    gradient_checkpointing: bool = False
    policy_from: str | None = None
    """A checkpoint whose weights the policy starts from instead of ``path`` (resuming); the
    reference policy still starts from ``path``. With LoRA, the checkpoint's adapter is loaded
    onto the base model at ``path``."""
    autocast: str = "none"
    """``"bfloat16"``: learner forwards run under ``torch.autocast`` (weights stay in ``dtype``)."""
    lora: LoraSection | None = None
    """LoRA adapters instead of full fine-tuning (see :mod:`grpo_run.core.learner.lora`)."""
    seed: int = 0
    """Where a new LoRA adapter's initial weights come from (``run.seed``)."""

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        """The dtype of autocast regions, ``None`` when forwards run in the weights' dtype."""
        return None if self.autocast == "none" else DTYPES[self.autocast]

    def load(self, source: str | None = None) -> torch.nn.Module:
        """The causal LM at ``source`` (default ``path``) on ``device``, in ``dtype``."""
        from transformers import AutoModelForCausalLM

        where = source if source is not None else self.path
        try:
            model = AutoModelForCausalLM.from_pretrained(
                where,
                dtype=self.torch_dtype,
                revision=self.revision if source is None else None,
                attn_implementation=self.attn_implementation,
                trust_remote_code=self.trust_remote_code,
            )
        except OSError as exc:  # missing directory, no hub access, missing files
            raise UserError(f"model {where!r}: cannot load the model: {exc}") from None
        return model.to(self.device)


@attrs.frozen
class LearnerSpec:
    """Everything a :class:`~grpo_run.core.learner.learner.Learner` reads."""

    model: ModelSpec
    algorithm: AlgorithmSection
    optim: OptimSection
    kl: KLSlot
    """KL weight, placement and reference policy (``kl.beta = 0``: none)."""
    loss: ComponentSpec
    kl_estimator: ComponentSpec | None
    """``None`` when ``kl.beta = 0``."""
    temperature: float
    """The sampling temperature: log-probs are computed under it, like the engine's."""
    total_steps: int
    """For the LR schedule."""
    pad_token_id: int
    forward_tokens: int | str = 0
    """Tokens per training forward (``learner.max_tokens_per_forward``; 0: the whole mini-batch;
    ``"auto"``: chosen by the learner from ``budget_plan``)."""
    logprob_forward_tokens: int | str = 0
    """Tokens per no-grad forward (old and reference log-probs; 0: the whole mini-batch; ``"auto"``)."""
    budget_plan: BudgetPlan | None = None
    """The memory plan's share of this learner, for an ``"auto"`` budget."""

    @property
    def uses_reference(self) -> bool:
        return self.kl.beta > 0 and self.kl.reference != "none"

    @property
    def reference_dtype(self) -> str:
        """The dtype the reference policy is held in (``kl.reference_dtype`` resolved for this
        model and device: :meth:`~grpo_run.core.config.slots.KLSlot.reference_dtype_for`)."""
        return self.kl.reference_dtype_for(self.model.dtype, self.model.autocast, self.model.device)


def resolve_device(name: str) -> str:
    """``"auto"``: ``"cuda"`` when a CUDA device is visible, else ``"cpu"``; a CUDA device asked
    for where there is none is a :class:`UserError` (not a silent fall-back to the CPU)."""
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UserError(f"model.device = {name!r}: no CUDA device is available (torch {torch.__version__})")
        index = int(name.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise UserError(f"model.device = {name!r}: only {torch.cuda.device_count()} CUDA device(s) visible")
    return name
