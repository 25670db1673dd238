"""The ``hf`` engine's LoRA adapters: peft's layers on its own copy of the base model.

The first adapter of a name wraps the engine's model with peft (``get_peft_model``: LoRA layers
replace the targeted modules of that same model object, so the sampling loop keeps calling the
transformers model); every sync then copies the adapter's tensors into those layers in place. A run holds
one adapter; more names would be more adapters on the same base (peft's ``add_adapter``), the one
in use chosen per call.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

from grpo_run import LoraAdapter


class PeftAdapters:
    """The adapters loaded into one model (``model`` is changed in place by the first)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.peft: Any = None
        """The ``peft.PeftModel`` around ``model`` once an adapter was loaded."""
        self.tensors: dict[str, dict[str, Any]] = {}
        """Per adapter name, its layers' tensors under peft's saved names (views of the parameters)."""
        self.active: str | None = None

    def load(self, adapter: LoraAdapter) -> None:
        """Copy ``adapter`` into its layers (made on first sight of its name) and use it."""
        import torch

        if adapter.name not in self.tensors:
            self._add(adapter)
        targets = self.tensors[adapter.name]
        _check_fits(adapter, targets)
        with torch.no_grad():
            for name, target in targets.items():
                target.copy_(adapter.tensors[name])
        if self.active != adapter.name:
            self.peft.set_adapter(adapter.name)
            self.peft.requires_grad_(False)
            self.active = adapter.name

    def _add(self, adapter: LoraAdapter) -> None:
        peft = _peft()
        config = peft.PeftConfig.from_peft_type(**{**adapter.config, "inference_mode": True})
        with _peft_quietly():
            if self.peft is None:
                self.peft = peft.get_peft_model(self.model, config, adapter_name=adapter.name)
            else:
                self.peft.add_adapter(adapter.name, config)
            # The state dict's tensors share the parameters' storage: copying into them loads.
            self.tensors[adapter.name] = peft.get_peft_model_state_dict(
                self.peft, adapter_name=adapter.name, save_embedding_layers=False)
        self.peft.requires_grad_(False)
        self.peft.eval()


def _check_fits(adapter: LoraAdapter, expected: Mapping[str, Any]) -> None:
    """The same tensor names and shapes as the layers made for its config: anything else is a
    corrupt or mismatched adapter, refused before a tensor is copied."""
    missing = sorted(set(expected) - set(adapter.tensors))
    extra = sorted(set(adapter.tensors) - set(expected))
    wrong = sorted(name for name in set(expected) & set(adapter.tensors)
                   if tuple(expected[name].shape) != tuple(adapter.tensors[name].shape))
    problems = [f"{what} {names[0]}" + (f" (+{len(names) - 1} more)" if len(names) > 1 else "")
                for what, names in (("missing", missing), ("unexpected", extra), ("wrong shape for", wrong)) if names]
    if problems:
        raise ValueError(f"adapter {adapter.name!r} does not fit its config (r = {adapter.config.get('r')}): "
                         + "; ".join(problems))


def _peft() -> Any:
    try:
        import peft
    except ImportError as exc:
        raise RuntimeError("the hf engine needs the peft package to take LoRA adapters: "
                           "pip install 'grpo-run[peft]'") from exc
    return peft


@contextlib.contextmanager
def _peft_quietly() -> Iterator[None]:
    """peft reads transformers' deprecated ``is_gradient_checkpointing`` while wrapping: its
    ``FutureWarning`` is theirs to fix and says nothing about the run."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield
