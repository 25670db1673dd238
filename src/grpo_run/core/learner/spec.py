"""What a learner needs, as a small picklable spec, and how to build one from it.

:class:`LearnerSpec` holds exactly the learner's settings (algorithm, optimizer, KL, the loss and
KL estimator as ``(class, config)`` pairs, where the weights come from) -- not the whole run
config -- so a learner can be constructed in another process or on another node: pickle the
spec, call :func:`build_learner` there.
"""

from __future__ import annotations

from typing import Any

import attrs
import torch

from grpo_run.core.config.schema import AlgorithmSection, KLSlot, OptimSection
from grpo_run.core.errors import UserError

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
    reference policy still starts from ``path``."""

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

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

    @property
    def uses_reference(self) -> bool:
        return self.kl.beta > 0 and self.kl.reference != "none"


def build_learner(spec: LearnerSpec, **kwargs: Any) -> Any:
    """Load the policy (and reference) and construct the learner; ``kwargs`` go to its constructor
    (``strategy`` for a data-parallel rank)."""
    from grpo_run.core.learner.learner import Learner

    model = spec.model
    policy = model.load(model.policy_from)
    if model.gradient_checkpointing:
        policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    reference = None
    if spec.uses_reference:  # frozen or Polyak: starts as the initial policy
        reference = model.load()
        reference.eval().requires_grad_(False)
    kl = spec.kl_estimator.build() if spec.kl_estimator is not None else None
    return Learner(spec, policy, reference, spec.loss.build(), kl, **kwargs)
