"""LoRA adapters as engines receive them, instead of full weights
(:class:`~grpo_run.TakesAdapters`).

An adapter is named: a run trains one, :data:`POLICY_ADAPTER`; an engine may hold several on one
base model (one per variant of a sweep), each a slot of its own that later syncs replace in place.

Everything here is re-exported by :mod:`grpo_run`; plugins import it from there.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:  # torch is only needed for annotations; keeps `import grpo_run` light
    import torch

POLICY_ADAPTER = "policy"
"""The name of a run's one trained adapter in its engines."""

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def _adapter_name(_inst: Any, _attribute: attrs.Attribute, value: str) -> None:
    # Engines use the name as a file name and as an id in their own APIs.
    if not _NAME.match(value):
        raise ValueError(f"an adapter name is 1-64 letters, digits, '_', '.' or '-' (not first), got {value!r}")


@attrs.frozen
class LoraAdapter:
    """One LoRA adapter at one policy version: what an engine loads at a weight sync.

    ``tensors`` are the adapter's own weights only (``lora_A``/``lora_B`` of each adapted layer,
    DoRA magnitudes and ``modules_to_save`` copies when the config has them), under the names peft
    saves them with (``adapter_model.safetensors``: ``base_model.model.<module>.lora_A.weight``).
    ``config`` is peft's adapter config as ``adapter_config.json`` holds it (``r``,
    ``lora_alpha``, ``target_modules`` as a list of module names, ``use_dora``, ...). Together they
    are a peft adapter directory's contents, in memory. Treat both as read-only.
    """

    name: str = attrs.field(validator=_adapter_name)
    """Which of the engine's adapters this replaces (:data:`POLICY_ADAPTER` for a run's policy)."""
    config: Mapping[str, Any]
    tensors: Mapping[str, torch.Tensor]

    @property
    def rank(self) -> int:
        return int(self.config["r"])

    @property
    def nbytes(self) -> int:
        """Bytes of the tensors (what a sync hands over)."""
        return tensors_nbytes(self.tensors)


@attrs.frozen
class AdapterSlots:
    """What an engine that will receive adapters instead of full weights is told when it is built
    (``EngineContext.adapters``): how many it holds at once and the largest rank among them.

    Until the first adapter arrives the engine generates with its base model, which is the policy
    then (LoRA's ``B`` starts at zero)."""

    max_rank: int = attrs.field(validator=attrs.validators.gt(0))
    count: int = attrs.field(default=1, validator=attrs.validators.gt(0))
    """Adapters held at once: 1 for a run."""
    target_modules: tuple[str, ...] | None = None
    """The module names (last name component, e.g. ``"q_proj"``) the adapters adapt, so an engine
    may add adapter layers only there; ``None``: every linear layer (``"all-linear"``)."""


def tensors_nbytes(tensors: Mapping[str, Any]) -> int:
    """Bytes of a state dict's tensors (torch or numpy; other values count 0); a mapping that knows
    its size (``nbytes``, e.g. one held in a single buffer or in Ray's object store) says so
    without being read."""
    known = getattr(tensors, "nbytes", None)
    if isinstance(known, int):
        return known
    return sum(int(getattr(t, "nbytes", 0)) for t in tensors.values())
