"""Built-in tasks plugin (registered through the grpo_run entry point 'tasks').

Procedural prompt sources; ``arithmetic`` is the task of the embedded default.
"""

from __future__ import annotations

from grpo_run import Registrar, hookimpl
from grpo_run.plugins.tasks.arithmetic import ArithmeticTask


@hookimpl
def grpo_run_register_tasks(register: Registrar) -> None:
    """Register ``arithmetic``."""
    register(ArithmeticTask)
