"""Built-in tasks plugin (registered through the grpo_run entry point 'tasks').

Procedural prompt sources; ``arithmetic`` is the task of the embedded default, ``reasoning_gym``
mixes the reasoning-gym package's generators (the ``reasoning-gym`` extra), ``verifiers`` reads a
``verifiers`` environment's taskset (the ``verifiers`` extra).
"""

from __future__ import annotations

from grpo_run import Registrar, hookimpl
from grpo_run.plugins.tasks.arithmetic import ArithmeticTask
from grpo_run.plugins.tasks.reasoning_gym import ReasoningGymTask
from grpo_run.plugins.tasks.verifiers_tasks import VerifiersTask


@hookimpl
def grpo_run_register_tasks(register: Registrar) -> None:
    """Register ``arithmetic``, ``reasoning_gym`` and ``verifiers``."""
    register(ArithmeticTask)
    register(ReasoningGymTask)
    register(VerifiersTask)
