"""Built-in tools plugin (registered through the grpo_run entry point 'tools')."""

from __future__ import annotations

from grpo_run import Registrar, hookimpl
from grpo_run.plugins.tools.calculator import CalculatorTool
from grpo_run.plugins.tools.python import PythonTool


@hookimpl
def grpo_run_register_tools(register: Registrar) -> None:
    """Register the built-in tools."""
    for tool in (CalculatorTool, PythonTool):
        register(tool)
