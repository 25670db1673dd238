"""The calculator tool: exact arithmetic through ``ast``, nothing else."""

from __future__ import annotations

import pytest

from grpo_run import ToolError
from grpo_run.plugins.tools.calculator import CalculatorConfig, CalculatorTool


@pytest.fixture
def calc():
    return CalculatorTool(CalculatorConfig())


@pytest.mark.parametrize("expression, answer", [
    ("12+7", "19"), ("12*(3+4)", "84"), ("7/2", "3.5"), ("-2**3", "-8"), ("2**-1", "0.5"),
    ("17//5", "3"), ("17%5", "2"), ("0.1+0.2", "0.3"), ("99999999999*99999999999", "9999999999800000000001"),
])
def test_arithmetic_is_exact(calc, expression, answer):
    assert calc({"expression": expression}) == answer


@pytest.mark.parametrize("expression, message", [
    ("__import__('os').system('id')", "unsupported in arithmetic: Call"),
    ("(1).real", "unsupported in arithmetic: Attribute"),
    ("x+1", "unsupported in arithmetic: Name"),
    ("1/0", "division by zero"),
    ("9**99999", "exponents must be whole numbers up to 64"),
    ("2**64**2", "exponents must be whole numbers up to 64"),
    ("1+", "not an arithmetic expression"),
    ("True+1", "unsupported in arithmetic: Constant"),
])
def test_anything_else_is_a_tool_error(calc, expression, message):
    with pytest.raises(ToolError, match=message.replace("(", r"\(").replace(")", r"\)").replace("*", r"\*")):
        calc({"expression": expression})


def test_limits_bound_the_work(calc):
    with pytest.raises(ToolError, match="more than 100 digits"):
        calc({"expression": "9**64*9**64"})
    with pytest.raises(ToolError, match="longer than 200 characters"):
        calc({"expression": "1+" * 150 + "1"})
    with pytest.raises(ToolError, match="string argument 'expression'"):
        calc({"expr": "1"})


def test_the_schema_is_an_openai_function(calc):
    schema = calc.schema()
    assert schema["type"] == "function" and schema["function"]["name"] == "calculator"
    assert schema["function"]["parameters"]["required"] == ["expression"]
