"""LoRA through ``peft``: wrapping the policy, the adapter-disabled reference, merged weights.

Three seams of the learner change with LoRA, and nothing else does:

* the policy is a ``peft.PeftModel`` whose only trainable parameters are the adapters (and any
  ``modules_to_save``); :func:`wrap_policy` builds it, or loads a saved adapter to resume;
* the reference policy is the same model with its adapters disabled (:class:`AdapterDisabledView`),
  so no second copy of the base weights exists;
* engines receive merged weights under the base model's parameter names
  (:func:`merged_state_dict`), so an engine that loads the base model takes them with
  ``load_state_dict(strict=True)`` and never needs to know about adapters.

``peft`` is imported only here, when LoRA is configured (extra ``grpo-run[peft]``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from grpo_run.core.compat import peft_reading_deprecated_properties
from grpo_run.core.config.schema import LoraSection
from grpo_run.core.errors import UserError

ADAPTER = "default"
"""The adapter's name inside the ``PeftModel`` (peft's default; the saved adapter is at the top
level of a checkpoint)."""


def _peft() -> Any:
    try:
        import peft
    except ImportError as exc:
        raise UserError(
            "model.lora needs the peft package: pip install 'grpo-run[peft]'"
        ) from exc
    return peft


def lora_config(section: LoraSection) -> Any:
    """The ``peft.LoraConfig`` for ``[model.lora]``."""
    peft = _peft()
    target = section.target_modules
    return peft.LoraConfig(
        r=section.r,
        lora_alpha=section.alpha,
        lora_dropout=section.dropout,
        target_modules=target if isinstance(target, str) else list(target),
        modules_to_save=list(section.modules_to_save) or None,
        layers_to_transform=list(section.layers_to_transform) or None,
        use_rslora=section.use_rslora,
        use_dora=section.use_dora,
        init_lora_weights=True if section.init == "default" else "gaussian",
        bias="none",  # trained biases would also change the adapter-disabled reference
        task_type="CAUSAL_LM",
    )


def wrap_policy(base: torch.nn.Module, section: LoraSection, adapter_from: str | None = None) -> Any:
    """``base`` with LoRA adapters: new ones per ``section``, or the adapter saved in the
    checkpoint directory ``adapter_from`` (resuming), trainable either way."""
    peft = _peft()
    with peft_reading_deprecated_properties():
        if adapter_from is None:
            try:
                return peft.get_peft_model(base, lora_config(section), adapter_name=ADAPTER)
            except ValueError as exc:  # e.g. target modules not found in the model
                raise UserError(f"model.lora: {exc}") from None
        try:
            return peft.PeftModel.from_pretrained(base, adapter_from, adapter_name=ADAPTER, is_trainable=True)
        except (OSError, ValueError) as exc:
            raise UserError(f"{adapter_from}: cannot load the LoRA adapter: {exc}") from None


class AdapterDisabledView:
    """The reference policy of a LoRA run: the policy's forward with every adapter switched off.

    It is not a module of its own (calling ``eval()`` or ``requires_grad_`` on it would change
    the policy); it offers what the learner's log-prob code uses: calling, ``parameters()`` and
    ``dtype``.
    """

    def __init__(self, policy: Any) -> None:
        self.policy = policy

    def __call__(self, **inputs: Any) -> Any:
        with self.policy.disable_adapter():
            return self.policy(**inputs)

    def parameters(self) -> Iterator[torch.nn.Parameter]:
        return self.policy.parameters()

    @property
    def dtype(self) -> torch.dtype:
        return self.policy.dtype


def merged_state_dict(policy: Any) -> dict[str, torch.Tensor]:
    """The weights of ``policy`` with its adapters merged in, named as in the base model.

    Each adapted layer is copied on its own and merged by peft (so LoRA, rsLoRA and DoRA merge
    exactly as ``merge_and_unload`` would), one layer at a time: the policy is never modified and
    only one extra layer is held at once besides the result. ``modules_to_save`` contribute their
    trained copy. The result is detached, on the policy's device, in its dtype.
    """
    from peft.tuners.tuners_utils import BaseTunerLayer
    from peft.utils import ModulesToSaveWrapper

    base = policy.get_base_model()
    out: dict[str, torch.Tensor] = {}
    replaced: list[str] = []
    for path, module in base.named_modules():
        if any(path.startswith(p + ".") for p in replaced):
            continue  # inside a layer already handled
        if isinstance(module, BaseTunerLayer):
            layer = copy.deepcopy(module)
            layer.merge(adapter_names=[ADAPTER])
            state = layer.get_base_layer().state_dict()
        elif isinstance(module, ModulesToSaveWrapper):
            state = module.modules_to_save[ADAPTER].state_dict()
        else:
            continue
        replaced.append(path)
        out.update({f"{path}.{key}": value.detach().clone() for key, value in state.items()})
    for key, value in base.state_dict().items():
        if not any(key.startswith(p + ".") for p in replaced):
            out[key] = value.detach().clone()
    return out


def save_merged_model(policy: Any, directory: Any) -> None:
    """Write the merged model to ``directory`` in Hugging Face format (config + safetensors)."""
    base = policy.get_base_model()
    # The base model object still holds peft's layers; its config and save logic are the
    # original model's, and the state dict handed over carries the original names.
    base.save_pretrained(directory, state_dict=merged_state_dict(policy), safe_serialization=True)


MERGED_DIR = "merged"
"""Where a LoRA checkpoint holds the merged model (``[model.lora] save_merged``)."""


def merged_model_writer(learner: Any) -> Callable[[Path], None] | None:
    """For a checkpoint of ``learner``: writes the merged model into ``<checkpoint>/merged`` when
    ``[model.lora] save_merged`` asks for it; ``None`` otherwise."""
    lora = learner.spec.model.lora
    if lora is None or not lora.save_merged:
        return None
    return lambda checkpoint: save_merged_model(learner.policy, checkpoint / MERGED_DIR)


ADAPTER_CONFIG = "adapter_config.json"
"""What marks a LoRA checkpoint (peft's adapter, with no full model beside it)."""


def write_merged_checkpoint(checkpoint: Path, directory: Path) -> None:
    """Write the model of the adapter checkpoint ``checkpoint`` (its base model, named in the
    adapter's config, with the adapter merged in) to ``directory`` in Hugging Face format, for
    an engine that needs full weights."""
    peft = _peft()
    model = peft.AutoPeftModelForCausalLM.from_pretrained(str(checkpoint), dtype=torch.float32)
    model.merge_and_unload().save_pretrained(directory, safe_serialization=True)
