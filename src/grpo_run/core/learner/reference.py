"""The reference policy of a KL penalty (``kl.beta > 0``, ``kl.reference`` "frozen" or "polyak").

It starts as the initial policy and never trains: it is loaded in ``kl.reference_dtype``
(:attr:`~grpo_run.core.learner.spec.LearnerSpec.reference_dtype`), in eval mode, without
gradients, and held as the learner strategy holds frozen weights
(:meth:`~grpo_run.core.learner.strategies.base.Strategy.setup_reference`): whole in one process
and under ddp or DeepSpeed ZeRO-1/2, sharded like the policy under fsdp2 and ZeRO-3. The strategy
chooses where it is loaded (fsdp2 loads it on the CPU and lets ``fully_shard`` move one unit at a
time to the device), so a rank never holds a whole second copy on its device when it need not.

With LoRA the reference is the base model with the adapters disabled
(:class:`~grpo_run.core.learner.lora.AdapterDisabledView`): nothing is loaded.
"""

from __future__ import annotations

import attrs
import torch

from grpo_run.core.learner.spec import LearnerSpec


@attrs.frozen
class ReferenceLoader:
    """Loads the reference policy of ``spec``; a strategy calls :meth:`load` with the device it
    loads on (:meth:`~grpo_run.core.learner.strategies.base.Strategy.setup_reference`)."""

    spec: LearnerSpec

    def load(self, device: str | None = None) -> torch.nn.Module:
        """The initial policy at ``model.path`` in ``spec.reference_dtype`` on ``device`` (default
        ``model.device``): eval mode, no gradients."""
        spec = self.spec
        model = attrs.evolve(spec.model, dtype=spec.reference_dtype, device=device or spec.model.device)
        return model.load().eval().requires_grad_(False)
