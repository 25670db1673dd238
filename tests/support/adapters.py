"""LoRA adapters for engine tests: a peft policy on a model with its adapter moved off zero, as
the learner would hand it to engines (the adapter alone, and the merged weights)."""

from __future__ import annotations

from typing import Any

import torch


def trained_adapter(model_dir: str, seed: int, r: int = 4, target_modules: Any = "all-linear", use_dora: bool = False,
                    scale: float = 0.05) -> tuple[Any, dict[str, torch.Tensor]]:
    """(the ``LoraAdapter`` engines get, the merged state dict) of a policy whose adapter weights
    were moved by ``scale`` x Gaussian noise (seeded)."""
    import peft
    from transformers import AutoModelForCausalLM

    from grpo_run.core.compat import peft_reading_deprecated_properties
    from grpo_run.core.learner.lora import adapter_snapshot, merged_state_dict

    config = peft.LoraConfig(r=r, lora_alpha=2 * r, target_modules=target_modules, use_dora=use_dora,
                             task_type="CAUSAL_LM")
    with peft_reading_deprecated_properties():
        policy = peft.get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), config,
                                     adapter_name="default")
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in policy.named_parameters():
            if "lora_" in name:
                param.add_(scale * torch.randn(param.shape, generator=generator))
    return adapter_snapshot(policy), merged_state_dict(policy)
