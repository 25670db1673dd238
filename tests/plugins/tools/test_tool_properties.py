"""Every built-in tool raises only :class:`grpo_run.ToolError`, whatever the model sends
(hypothesis, derandomized).

A tool call's arguments come from the policy: any text, any nesting, numbers of any size, a
dict with the wrong keys or no dict at all. Another exception stops the run (the tools
contract, docs/environments.md), so each tool is driven with all of these.
"""

from __future__ import annotations

import shutil
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from grpo_run import ToolError
from grpo_run.plugins.tools import CalculatorTool, PythonTool
from grpo_run.plugins.tools.calculator import CalculatorConfig
from grpo_run.plugins.tools.python import PythonToolConfig

FAST = settings(
    max_examples=150, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
)
"""Derandomized and without an example database: the same examples on every run."""

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
"""What a JSON tool-call argument can decode to (plus NaN and infinities, which Python's json reads)."""

numbers = st.one_of(
    st.integers(min_value=-(10**120), max_value=10**120).map(str),
    st.sampled_from(["10**64", "10**35", "1e308", "1e309", "1e-320", "9" * 150, "0", "0.0", "1_000", "0x1f", "1j"]),
    st.floats(allow_nan=False).map(repr),
)
"""Literals a policy writes: huge and tiny, exact and float, some past float's range."""


def _expressions() -> st.SearchStrategy[str]:
    binary = st.sampled_from(["+", "-", "*", "/", "//", "%", "**"])
    return st.recursive(
        numbers,
        lambda inner: st.one_of(
            st.tuples(inner, binary, inner).map(lambda t: f"{t[0]}{t[1]}{t[2]}"),
            inner.map(lambda e: f"({e})"),
            st.tuples(st.sampled_from(["-", "+", "~", "not "]), inner).map("".join),
        ),
        max_leaves=6,
    )


arguments = st.one_of(
    json_values,
    st.dictionaries(st.sampled_from(["expression", "code", "expr", ""]), json_values, max_size=2),
)
"""Bad argument dicts and non-dicts."""


def examples(*values: Any):
    """Several ``@example``s, each given as the test's one argument."""
    def apply(test):
        for value in values:
            test = example(value)(test)
        return test
    return apply


def _only_tool_errors(tool: Any, argument: Any) -> None:
    try:
        result = tool(argument)
    except ToolError:
        return
    assert isinstance(result, str)


@FAST
@given(_expressions() | st.text(max_size=60))
@examples("(10**64*10**35)**64", "1e309-1e309", "1e309", "2**64**2**0.5")
@examples("(" * 120 + "1" + ")" * 40, "-" * 199 + "1", "\x00", "\ud800")
def test_calculator_expressions_raise_only_tool_errors(expression: str) -> None:
    _only_tool_errors(CalculatorTool(CalculatorConfig()), {"expression": expression})


@FAST
@given(arguments)
@examples(None, ["1+1"], "1+1", {"expression": b"1"})
def test_calculator_arguments_raise_only_tool_errors(argument: Any) -> None:
    _only_tool_errors(CalculatorTool(CalculatorConfig()), argument)


@FAST
@given(_expressions())
def test_calculator_with_wide_limits_raises_only_tool_errors(expression: str) -> None:
    """Limits a config may set: more digits than Python's int-to-string limit (4300)."""
    tool = CalculatorTool(CalculatorConfig(max_digits=10_000, max_exponent=1000))
    _only_tool_errors(tool, {"expression": expression})


needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
SANDBOXED = settings(FAST, max_examples=12)
"""Each example starts a sandboxed interpreter (~0.1 s)."""


@needs_bwrap
@SANDBOXED
@given(st.text(max_size=40) | _expressions().map(lambda e: f"print({e})"))
@examples("\ud800", "\x00", "raise SystemExit(3)", "import os; os._exit(0)")
def test_python_programs_raise_only_tool_errors(code: str) -> None:
    _only_tool_errors(PythonTool(PythonToolConfig(timeout_s=2.0)), {"code": code})


@FAST
@given(arguments.filter(lambda a: not (isinstance(a, dict) and isinstance(a.get("code"), str))))
@examples(None, ["print(1)"], "print(1)")
def test_python_arguments_raise_only_tool_errors(argument: Any) -> None:
    """Arguments without a program never reach the sandbox."""
    _only_tool_errors(PythonTool(PythonToolConfig()), argument)


def test_every_built_in_tool_is_property_tested() -> None:
    """A new built-in tool needs its own property test above."""
    from grpo_run.plugins import tools

    registered: list[type] = []
    tools.grpo_run_register_tools(registered.append)
    assert {tool.name for tool in registered} == {"calculator", "python"}
