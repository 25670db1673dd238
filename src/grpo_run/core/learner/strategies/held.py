"""What a rank holds of a model's weights, whichever way its strategy holds them."""

from __future__ import annotations

import torch
from torch.distributed.tensor import DTensor


def held_bytes(model: torch.nn.Module) -> int:
    """Bytes of ``model``'s parameters held by this process (a tied parameter once).

    A plain parameter counts whole; an fsdp2 one (a DTensor) its local shard's storage (padding
    included); a DeepSpeed ZeRO-3 one its partition, plus the whole tensor where ZeRO-3 keeps a
    small parameter gathered (``stage3_param_persistence_threshold``)."""
    total = 0
    for param in model.parameters():
        if hasattr(param, "ds_tensor"):
            total += param.ds_tensor.numel() * param.ds_tensor.element_size()
            if getattr(param, "ds_persist", False):
                total += param.ds_numel * param.element_size()
        elif isinstance(param, DTensor):
            total += param.to_local().untyped_storage().nbytes()
        else:
            total += param.numel() * param.element_size()
    return total
