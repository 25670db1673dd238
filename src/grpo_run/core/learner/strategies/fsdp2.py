"""``strategy = "fsdp2"``: torch's ``fully_shard`` (FSDP2).

Each decoder layer (the model's ``_no_split_modules`` classes) and then the whole model become
FSDP units: parameters, gradients and optimizer state are sharded over the ranks as DTensors,
all-gathered for each unit's forward and backward, and gradients are reduce-scattered (averaged)
after every micro-batch's backward, so they stay sharded between micro-batches.
Full weights for checkpoints and engines come from ``get_model_state_dict(full_state_dict=True)``
(rank 0 receives them, on the CPU); the optimizer state is checkpointed the same way, keyed by
parameter name, so a checkpoint resumes under any number of fsdp2 ranks.

The reference policy (``kl.beta > 0``) is sharded the same way (the same units and mesh, the same
parameter offloading, no optimizer): loaded on the CPU, each unit is moved to the device as it is
sharded. Its no-grad forwards gather one unit at a time, like the policy's, and the root unit
(embeddings, final norm, output layer) is resharded after each forward too: it has no backward to
do it. A Polyak update is local arithmetic between matching shards (no gathering). Its full
weights for a checkpoint are gathered like the policy's.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard
from torch.distributed.tensor import DTensor

from grpo_run.core.config.schema import OptimSection
from grpo_run.core.learner.reference import ReferenceLoader
from grpo_run.core.learner.strategies.base import make_optimizer
from grpo_run.core.learner.strategies.parallel import DataParallel

_FULL_ON_RANK0 = StateDictOptions(full_state_dict=True, cpu_offload=True)


class FSDP2Strategy(DataParallel):
    name = "fsdp2"
    state_format = "fsdp2"

    def __init__(self, rank: int, world_size: int, device: torch.device, *, offload_params: bool = False) -> None:
        super().__init__(rank, world_size, device)
        self.offload_params = offload_params

    def setup(self, policy: torch.nn.Module, optim: OptimSection, max_grad_norm: float) -> torch.optim.Optimizer:
        self.policy = policy
        self.max_grad_norm = max_grad_norm
        self.mesh = init_device_mesh(self.device.type, (self.world_size,))
        self._shard(policy)
        # The optimizer must see the sharded (DTensor) parameters, so it is built after sharding.
        self.optimizer = make_optimizer(policy.parameters(), optim)
        return self.optimizer

    def _shard(self, model: torch.nn.Module, **root: Any) -> None:
        """Each decoder layer (the model's ``_no_split_modules`` classes), then the whole model,
        becomes an FSDP unit (``root``: further arguments for the whole model's)."""
        kwargs: dict[str, Any] = {"mesh": self.mesh}
        if self.offload_params:
            kwargs["offload_policy"] = CPUOffloadPolicy()
        unit_types = set(getattr(model, "_no_split_modules", None) or ())
        for module in model.modules():
            if type(module).__name__ in unit_types:
                fully_shard(module, **kwargs)
        fully_shard(model, **kwargs, **root)

    def load_device(self, device: str) -> str:
        # On the CPU first, like the reference: fully_shard moves each unit's parameters to the
        # device as it shards them, so no rank holds the whole policy on its device.
        return "cpu"

    def setup_reference(self, loader: ReferenceLoader) -> torch.nn.Module:
        # On the CPU first: fully_shard moves each unit's parameters to the mesh's device as it
        # shards them, so the device never holds more than one whole unit of the reference.
        reference = loader.load("cpu")
        # The root unit reshards after every forward: left to itself it would stay gathered
        # until a backward that a reference never runs.
        self._shard(reference, reshard_after_forward=True)
        return reference

    @contextmanager
    def accumulate(self, last: bool) -> Iterator[None]:
        # Every micro-batch's backward reduce-scatters its gradient, which adds to the sharded
        # gradient of the micro-batches before it: a rank never holds more than its shard of the
        # gradients (skipping the sync until the last micro-batch would keep the whole unsharded
        # gradient on every rank between micro-batches: 4 bytes a parameter, 28 GiB for a 7B model).
        yield

    def _clip_gradients(self) -> float:
        norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
        return float(norm.full_tensor() if isinstance(norm, DTensor) else norm)

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        state = get_model_state_dict(self.policy, options=_FULL_ON_RANK0)  # collective
        return state if self.is_main else None

    def optimizer_state_dict(self) -> Any:
        state = get_optimizer_state_dict(self.policy, self.optimizer, options=_FULL_ON_RANK0)  # collective
        return state if self.is_main else None

    def load_optimizer_state_dict(self, state: Any) -> None:
        # Rank 0 holds the checkpoint's full state; the others receive their shards from it.
        options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
        set_optimizer_state_dict(self.policy, self.optimizer, optim_state_dict=state if self.is_main else {}, options=options)

    def polyak(self, reference: torch.nn.Module, alpha: float) -> None:
        # Reference and policy are sharded alike: each rank moves its own shard, nothing is gathered.
        with torch.no_grad():
            for ref, param in zip(reference.parameters(), self.policy.parameters(), strict=True):
                if not (isinstance(ref, DTensor) and isinstance(param, DTensor) and ref.placements == param.placements
                        and ref.shape == param.shape):
                    raise RuntimeError("the fsdp2 reference and policy are not sharded alike")
                mine = ref.to_local()
                mine.mul_(1.0 - alpha).add_(param.to_local().to(device=mine.device, dtype=mine.dtype), alpha=alpha)

    def reference_state_dict(self, reference: torch.nn.Module) -> dict[str, torch.Tensor] | None:
        state = get_model_state_dict(reference, options=_FULL_ON_RANK0)  # collective, one parameter at a time
        return state if self.is_main else None

    def load_reference_state_dict(self, reference: torch.nn.Module, state: Mapping[str, torch.Tensor]) -> None:
        # Every rank holds the full weights: each keeps its shard of them.
        set_model_state_dict(reference, dict(state), options=StateDictOptions(full_state_dict=True))
