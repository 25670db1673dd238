"""Choices an ``[environment]`` run makes when the config leaves them open, and the console
lines that say so.

- **The renderer.** Without a ``[renderer]`` table the chat format is the model's own: the
  renderer a model plugin names for its format (the shipped char models: ``tiny-chat``), else the
  tokenizer's chat template (``chat-template``). A tokenizer without one is a one-line error.
- **The rows' verifiers.** Rows of a task name a verifier (``math`` for ``arithmetic``); with
  ``scoring.row_verifiers = true`` that verifier scores each episode's last assistant turn and its
  score adds to the environment's reward. Said once at start, with the key that turns it off.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from grpo_run.core.config.schema import RunConfig
from grpo_run.core.errors import UserError
from grpo_run.core.plugins.families import MODEL, RENDERER
from grpo_run.core.plugins.registry import ComponentRegistry

CHAT_TEMPLATE_RENDERER = "chat-template"
"""The renderer over the tokenizer's own chat template (a built-in, found through the registry)."""


def chosen_renderer(cfg: RunConfig, registry: ComponentRegistry, tokenizer: Any) -> tuple[str, Any, str | None]:
    """(renderer name, its config, a console note when the config did not name it)."""
    if cfg.renderer is not None:
        return cfg.renderer.name, cfg.renderer.config, None
    model = cfg.model.name_or_path
    name = getattr(registry.get(MODEL, model), "renderer", None) if registry.has(MODEL, model) else None
    if name is not None:
        why = f"the chat format of the {model!r} model"
    elif getattr(tokenizer, "chat_template", None):
        name, why = CHAT_TEMPLATE_RENDERER, "the model tokenizer's chat template"
    else:
        raise UserError(f"model.name_or_path={model!r}: its tokenizer has no chat template, so the [environment] "
                        'needs a [renderer] table naming the chat format (e.g. name = "chat-template" with '
                        'chat_template = "chatml-tools")')
    return name, registry.get(RENDERER, name).Config(), f'renderer "{name}": {why} (no [renderer] table)'


def row_verifier_note(cfg: RunConfig, rows: Iterable[Mapping[str, Any]]) -> str | None:
    """The start-up line of an environment run whose rows' own verifiers also score episodes."""
    if cfg.environment is None or not cfg.scoring.row_verifiers:
        return None
    named: set[str] = set()
    for row in rows:
        verifier = row.get("verifier")
        named.update(verifier if isinstance(verifier, list) else [verifier] if verifier else [])
    if not named:
        return None
    which = ", ".join(sorted(named))
    return (f"environment {cfg.environment.name!r}: each episode's last turn is also scored by the rows' verifier "
            f"({which}) against the row's ground truth, added to the environment's reward; "
            "set scoring.row_verifiers = false for the environment's reward alone")
