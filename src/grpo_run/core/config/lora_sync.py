"""What a LoRA run's engines receive at each weight sync (``model.lora.sync``): the adapter, or
the whole model with the adapter merged in.

Unset, a run syncs the adapter when its engine can serve it (the engine class has the
:class:`~grpo_run.TakesAdapters` ability and does not refuse this LoRA config), and merged weights
otherwise, saying why once. An explicit ``sync = "adapter"`` that the engine refuses is a config
error, found before anything loads. Decided from the config alone, the same way by every command
(``grpo-run check``, a run, ``grpo-run eval``).
"""

from __future__ import annotations

from typing import Any, Literal

import attrs

from grpo_run.core.config.schema import LoraSection, RunConfig
from grpo_run.core.errors import ConfigIssue
from grpo_run.core.plugins.abilities import TakesAdapters
from grpo_run.core.plugins.adapters import AdapterSlots
from grpo_run.core.plugins.families import ENGINE
from grpo_run.core.plugins.registry import ComponentRegistry

SYNC_KEY = "model.lora.sync"


def peft_fields(section: LoraSection) -> dict[str, Any]:
    """``[model.lora]`` as ``peft.LoraConfig`` keywords (the keys ``adapter_config.json`` holds);
    what engines are asked about before the run (:meth:`~grpo_run.TakesAdapters.refuses_adapter`)."""
    target = section.target_modules
    return {
        "r": section.r,
        "lora_alpha": section.alpha,
        "lora_dropout": section.dropout,
        "target_modules": target if isinstance(target, str) else list(target),
        "modules_to_save": list(section.modules_to_save) or None,
        "layers_to_transform": list(section.layers_to_transform) or None,
        "use_rslora": section.use_rslora,
        "use_dora": section.use_dora,
        "init_lora_weights": True if section.init == "default" else "gaussian",
        "bias": "none",  # trained biases would also change the adapter-disabled reference
        "task_type": "CAUSAL_LM",
    }


@attrs.frozen
class LoraSync:
    """The sync a LoRA run uses, and why."""

    mode: Literal["adapter", "merged"]
    refusal: str | None
    """Why the engine cannot serve the adapter (``None``: it can), whatever the config asked."""
    explicit: bool
    """``model.lora.sync`` was set in the config."""

    @property
    def note(self) -> str | None:
        """The console line of a run that fell back to merged weights; ``None`` otherwise."""
        if self.mode == "adapter" or self.explicit or self.refusal is None:
            return None
        return f"{self.refusal}; syncing merged weights ({SYNC_KEY})"


def engine_refusal(cfg: RunConfig, registry: ComponentRegistry) -> str | None:
    """Why the run's engine cannot serve ``[model.lora]`` as an adapter; ``None`` when it can."""
    assert cfg.model.lora is not None
    name = cfg.engine.name
    cls = registry.get(ENGINE, name)
    if not isinstance(cls, TakesAdapters):
        return f"the {name} engine cannot take adapters (it has no update_adapter)"
    try:
        return cls.refuses_adapter(cfg.engine.config, peft_fields(cfg.model.lora))
    except Exception as exc:  # plugin code: name it, do not crash
        return f"the {name} engine's refuses_adapter raised {type(exc).__name__}: {exc}"


def choose_lora_sync(cfg: RunConfig, registry: ComponentRegistry) -> LoraSync | None:
    """The run's sync; ``None`` without ``[model.lora]``."""
    lora = cfg.model.lora
    if lora is None:
        return None
    refusal = engine_refusal(cfg, registry)
    if lora.sync is not None:
        return LoraSync(lora.sync, refusal, explicit=True)
    return LoraSync("merged" if refusal else "adapter", refusal, explicit=False)


def lora_sync_issues(cfg: RunConfig, registry: ComponentRegistry) -> list[ConfigIssue]:
    """An explicit ``sync = "adapter"`` the engine refuses, as a config error."""
    choice = choose_lora_sync(cfg, registry)
    if choice is None or choice.mode != "adapter" or choice.refusal is None:
        return []
    return [ConfigIssue(SYNC_KEY, f'is "adapter", but the {cfg.engine.name} engine cannot serve this adapter: '
                                  f'{choice.refusal} (set sync = "merged", or leave it unset)')]


def resolved_lora(cfg: RunConfig, registry: ComponentRegistry) -> LoraSection | None:
    """``[model.lora]`` with ``sync`` decided (what the learner is built with)."""
    choice = choose_lora_sync(cfg, registry)
    if choice is None:
        return None
    assert cfg.model.lora is not None
    return attrs.evolve(cfg.model.lora, sync=choice.mode)


def adapter_slots(cfg: RunConfig, registry: ComponentRegistry) -> AdapterSlots | None:
    """What the engine is told to hold when the run syncs adapters (``EngineContext.adapters``)."""
    choice = choose_lora_sync(cfg, registry)
    if choice is None or choice.mode != "adapter":
        return None
    lora = cfg.model.lora
    assert lora is not None
    target = lora.target_modules
    names = None if isinstance(target, str) else tuple(sorted({name.rsplit(".", 1)[-1] for name in target}))
    return AdapterSlots(max_rank=lora.r, target_modules=names)
