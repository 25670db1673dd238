"""The ``hf`` engine's LoRA adapters: peft's layers on its own copy of the base model.

The first adapter of a name wraps the engine's model with peft (``get_peft_model``: LoRA layers
replace the targeted modules of that same model object, so the sampling loop keeps calling the
transformers model); every sync then copies the adapter's tensors into those layers in place. A run holds
one adapter; a sweep one per variant, more adapters on the same base (peft's ``add_adapter``): a
sampling call whose rows all use one adapter makes it the active one, a call mixing adapters goes
through the ``PeftModel`` with each row's name (peft's ``adapter_names``; not with DoRA, which peft
cannot mix).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Mapping, Sequence
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
        self._activate(adapter.name)

    def has(self, name: str | None) -> bool:
        return name is not None and name in self.tensors

    def mixes(self, names: set[str | None]) -> bool:
        """Whether one forward can serve rows of all these adapters (``None``: the base model)."""
        if len(names) <= 1:
            return True
        return self.peft is not None and not any(
            getattr(self.peft.peft_config.get(n), "use_dora", False) for n in names if n is not None)

    def model_for(self, adapters: Sequence[str | None]) -> tuple[Any, list[str] | None, contextlib.AbstractContextManager]:
        """What a sampling call whose distinct prompts use ``adapters`` (loaded ones, ``None``: the
        base model) calls: ``(model, adapter_names or None, a context to call it in)``."""
        distinct = set(adapters)
        if self.peft is None:
            return self.model, None, contextlib.nullcontext()
        if distinct == {None}:
            return self.model, None, self.peft.disable_adapter()
        if len(distinct) == 1:
            (name,) = distinct
            assert name is not None
            self._activate(name)
            return self.model, None, contextlib.nullcontext()
        return self.peft, [name if name is not None else "__base__" for name in adapters], contextlib.nullcontext()

    def _activate(self, name: str) -> None:
        if self.active != name:
            self.peft.set_adapter(name)
            self.peft.requires_grad_(False)
            self.active = name

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
