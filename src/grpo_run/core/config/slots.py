"""Plugin slots of the run configuration: which component fills a family's place (its registered
``name``) and that component's own structured ``Config``."""

from __future__ import annotations

from typing import Any, Literal

import attrs
from attrs import validators as v

from grpo_run.core.config.validators import non_negative, positive


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

    ``name``, ``beta``, ``placement``, ``reference``, ``reference_dtype``, ``ref_policy_update_freq``
    and ``alpha`` are core keys of the ``[kl]`` table; every other key configures the chosen estimator.
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
    reference_dtype: Literal["auto", "float32", "bfloat16", "float16"] = attrs.field(default="auto", kw_only=True)
    """The dtype the reference policy's weights are held in (it never trains: no master copy is
    needed). ``"auto"``: on CUDA the dtype its forwards compute in (``model.autocast`` when set,
    else ``model.dtype``), on the CPU ``model.dtype``; a ``"polyak"`` reference stays in
    ``model.dtype``, since in bf16 its small moves towards the policy would be rounded away."""
    config: Any = None

    def reference_dtype_for(self, model_dtype: str, autocast: str, device: str) -> str:
        """The dtype the reference is held in, for weights in ``model_dtype`` on ``device``
        (``"cuda..."`` or ``"cpu"``) under ``model.autocast = autocast``.

        ``"auto"`` keeps a Polyak reference in ``model_dtype``: each update moves it by ``alpha``
        times its distance to the policy, and bf16 (8 significant bits) rounds away a move below
        0.2-0.4% of a weight, so a bf16 Polyak reference would stall wherever the policy is close
        to it."""
        if self.reference_dtype != "auto":
            return self.reference_dtype
        if self.reference == "polyak" or not device.startswith("cuda"):
            return model_dtype
        return autocast if autocast != "none" else model_dtype
