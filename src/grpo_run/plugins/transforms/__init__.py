"""Built-in row transforms plugin (registered through the grpo_run entry point 'transforms').

A data source picks one with ``transform = "<name>"``: ``gsm8k`` and ``boxed`` turn the worked
solutions of GSM8K and MATH into the final answers the ``math`` verifier compares against.
"""

from __future__ import annotations

from grpo_run import Registrar, hookimpl
from grpo_run.plugins.transforms.answers import BoxedAnswer, Gsm8kAnswer


@hookimpl
def grpo_run_register_transforms(register: Registrar) -> None:
    """Register ``gsm8k`` and ``boxed``."""
    register(Gsm8kAnswer)
    register(BoxedAnswer)
