"""Built-in renderers plugin (registered through the grpo_run entry point 'renderers')."""

from __future__ import annotations

from grpo_run import Registrar, hookimpl
from grpo_run.plugins.renderers.hermes import ChatTemplateRenderer
from grpo_run.plugins.renderers.tiny import TinyChatRenderer


@hookimpl
def grpo_run_register_renderers(register: Registrar) -> None:
    """Register the built-in renderers."""
    for renderer in (ChatTemplateRenderer, TinyChatRenderer):
        register(renderer)
