"""LoRA through ``peft``: wrapping the policy, the adapter-disabled reference, what engines receive.

Three seams of the learner change with LoRA, and nothing else does:

* the policy is a ``peft.PeftModel`` whose only trainable parameters are the adapters (and any
  ``modules_to_save``); :func:`wrap_policy` builds it, or loads a saved adapter to resume;
* the reference policy is the same model with its adapters disabled (:class:`AdapterDisabledView`),
  so no second copy of the base weights exists;
* engines receive, at every weight sync, either the adapter alone (``model.lora.sync =
  "adapter"``: :func:`adapter_snapshot`, a :class:`~grpo_run.LoraAdapter` of the adapter's tensors
  and peft config, which an engine with :class:`~grpo_run.TakesAdapters` loads on its own copy of
  the base model) or the merged weights under the base model's parameter names
  (``"merged"``: :func:`merged_state_dict`, which an engine loads with
  ``load_state_dict(strict=True)`` without knowing about adapters).

A sweep (``grpo-run sweep``) holds one adapter per variant on one base model: every function
here takes the adapter's name (a run's is :data:`ADAPTER`); :func:`add_adapter` adds one, and
:func:`save_adapter` writes one where a run's checkpoint has its own. A new adapter's initial
weights come from ``run.seed`` alone, so a variant starts from the adapter its config gets alone.

``peft`` is imported only here, when LoRA is configured (extra ``grpo-run[peft]``).
"""

import contextlib
import copy
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from grpo_run.core.compat import peft_reading_deprecated_properties
from grpo_run.core.config.lora_sync import peft_fields
from grpo_run.core.config.schema import LoraSection
from grpo_run.core.errors import UserError
from grpo_run.core.plugins.adapters import POLICY_ADAPTER, LoraAdapter

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
    return _peft().LoraConfig(**peft_fields(section))


def wrap_policy(base: torch.nn.Module, section: LoraSection, adapter_from: str | None = None, *, seed: int = 0,
                name: str = ADAPTER) -> Any:
    """``base`` with a LoRA adapter named ``name``: a new one per ``section`` (its initial weights
    from ``seed``), or the adapter saved in the checkpoint directory ``adapter_from`` (resuming),
    trainable either way."""
    peft = _peft()
    with peft_reading_deprecated_properties():
        if adapter_from is None:
            try:
                with _seeded(seed):
                    return peft.get_peft_model(base, lora_config(section), adapter_name=name)
            except ValueError as exc:  # e.g. target modules not found in the model
                raise UserError(f"model.lora: {exc}") from None
        try:
            return peft.PeftModel.from_pretrained(base, adapter_from, adapter_name=name, is_trainable=True)
        except (OSError, ValueError) as exc:
            raise UserError(f"{adapter_from}: cannot load the LoRA adapter: {exc}") from None


def add_adapter(policy: Any, name: str, section: LoraSection, adapter_from: str | None = None, *, seed: int = 0) -> None:
    """Another adapter on the peft model ``policy`` (a sweep's variant): new, its initial weights
    the ones :func:`wrap_policy` gives for the same ``section`` and ``seed``, or loaded from the
    checkpoint directory ``adapter_from``. Each adapter's layers are its own; only the active
    adapter's parameters are trainable (``policy.set_adapter``)."""
    with peft_reading_deprecated_properties():
        if adapter_from is None:
            try:
                with _seeded(seed):
                    policy.add_adapter(name, lora_config(section))
            except ValueError as exc:
                raise UserError(f"model.lora: {exc}") from None
            return
        try:
            policy.load_adapter(adapter_from, adapter_name=name, is_trainable=True)
        except (OSError, ValueError) as exc:
            raise UserError(f"{adapter_from}: cannot load the LoRA adapter: {exc}") from None


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """New adapter weights drawn from ``seed`` alone, leaving torch's global generator as it was."""
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


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


def merged_state_dict(policy: Any, adapter: str = ADAPTER) -> dict[str, torch.Tensor]:
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
            layer.merge(adapter_names=[adapter])  # a layer without this adapter (another variant's) stays as it is
            state = layer.get_base_layer().state_dict()
        elif isinstance(module, ModulesToSaveWrapper):
            if adapter not in module.modules_to_save:
                continue
            state = module.modules_to_save[adapter].state_dict()
        else:
            continue
        replaced.append(path)
        out.update({f"{path}.{key}": value.detach().clone() for key, value in state.items()})
    for key, value in base.state_dict().items():
        if not any(key.startswith(p + ".") for p in replaced):
            out[key] = value.detach().clone()
    return out


def adapter_snapshot(policy: Any, adapter: str = ADAPTER) -> LoraAdapter:
    """The policy's adapter as engines receive it: its tensors (detached copies, under peft's saved
    names) and its peft config as ``adapter_config.json`` would hold it (``target_modules``
    resolved to the module names, e.g. from ``"all-linear"``)."""
    peft = _peft()
    # Not "auto": that would read the base model's config from disk at every sync to decide.
    state = peft.get_peft_model_state_dict(policy, adapter_name=adapter, save_embedding_layers=False)
    tensors = {name: value.detach().clone() for name, value in state.items()}
    return LoraAdapter(POLICY_ADAPTER, adapter_config(policy, adapter), tensors)


def adapter_config(policy: Any, adapter: str = ADAPTER) -> dict[str, Any]:
    """The policy's peft adapter config as plain JSON data (sets as sorted lists)."""
    config = policy.peft_config[adapter].to_dict()
    return json.loads(json.dumps(config, default=lambda value: sorted(value) if isinstance(value, set) else str(value)))


ADAPTER_CONFIG = "adapter_config.json"
"""What marks a LoRA checkpoint (peft's adapter, with no full model beside it)."""
ADAPTER_WEIGHTS = "adapter_model.safetensors"
"""The adapter's tensors in a checkpoint (peft's file name)."""


def saved_adapter(checkpoint: Path) -> LoraAdapter:
    """The adapter saved in the checkpoint directory ``checkpoint``, as engines receive it."""
    from safetensors.torch import load_file

    try:
        config = json.loads((checkpoint / ADAPTER_CONFIG).read_text(encoding="utf-8"))
        tensors = load_file(checkpoint / ADAPTER_WEIGHTS)
    except (OSError, ValueError) as exc:
        raise UserError(f"{checkpoint}: cannot read the LoRA adapter: {exc}") from None
    return LoraAdapter(POLICY_ADAPTER, config, tensors)


def save_adapter(policy: Any, adapter: str, directory: Path) -> None:
    """Write adapter ``adapter`` of ``policy`` into ``directory`` as peft writes a run's only
    adapter (``adapter_config.json``, ``adapter_model.safetensors``, at the top level): what
    ``PeftModel.from_pretrained`` and a run's ``--resume`` load."""
    from safetensors.torch import save_file

    peft = _peft()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = peft.get_peft_model_state_dict(policy, adapter_name=adapter, save_embedding_layers=False)
    save_file({k: v.detach().to("cpu").contiguous() for k, v in state.items()}, str(directory / ADAPTER_WEIGHTS),
              metadata={"format": "pt"})
    config = policy.peft_config[adapter]
    inference_mode = config.inference_mode
    config.inference_mode = True  # as peft saves it
    try:
        config.save_pretrained(str(directory))
    finally:
        config.inference_mode = inference_mode


def save_merged_model(policy: Any, directory: Any, adapter: str = ADAPTER) -> None:
    """Write the merged model to ``directory`` in Hugging Face format (config + safetensors)."""
    base = policy.get_base_model()
    # The base model object still holds peft's layers; its config and save logic are the
    # original model's, and the state dict handed over carries the original names.
    base.save_pretrained(directory, state_dict=merged_state_dict(policy, adapter), safe_serialization=True)


MERGED_DIR = "merged"
"""Where a LoRA checkpoint holds the merged model (``[model.lora] save_merged``)."""


def merged_model_writer(learner: Any) -> Callable[[Path], None] | None:
    """For a checkpoint of ``learner``: writes the merged model into ``<checkpoint>/merged`` when
    ``[model.lora] save_merged`` asks for it; ``None`` otherwise."""
    lora = learner.spec.model.lora
    if lora is None or not lora.save_merged:
        return None
    adapter = getattr(learner, "adapter", ADAPTER)
    return lambda checkpoint: save_merged_model(learner.policy, checkpoint / MERGED_DIR, adapter)


def write_merged_checkpoint(checkpoint: Path, directory: Path) -> None:
    """Write the model of the adapter checkpoint ``checkpoint`` (its base model, named in the
    adapter's config, with the adapter merged in) to ``directory`` in Hugging Face format, for
    an engine that needs full weights."""
    peft = _peft()
    model = peft.AutoPeftModelForCausalLM.from_pretrained(str(checkpoint), dtype=torch.float32)
    model.merge_and_unload().save_pretrained(directory, safe_serialization=True)
