"""Built-in environments plugin (registered through the grpo_run entry point 'environments')."""

from __future__ import annotations

from grpo_run import Registrar, hookimpl
from grpo_run.plugins.environments.agent import AgentEnvironment
from grpo_run.plugins.environments.games import Counter, GuessDigit
from grpo_run.plugins.environments.text_game import TextGameEnvironment
from grpo_run.plugins.environments.tools import ToolsEnvironment
from grpo_run.plugins.environments.verifiers_env import VerifiersEnvironment


@hookimpl
def grpo_run_register_environments(register: Registrar) -> None:
    """Register the built-in environments."""
    for environment in (AgentEnvironment, ToolsEnvironment, TextGameEnvironment, GuessDigit, Counter,
                        VerifiersEnvironment):
        register(environment)
