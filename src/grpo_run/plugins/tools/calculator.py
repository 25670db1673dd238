"""The ``calculator`` tool: exact arithmetic on an expression, read with :mod:`ast` (never ``eval``).

Numbers, ``+ - * / // % **``, unary signs and parentheses; integers stay exact, a division that
does not come out whole gives a decimal. Limits keep a hostile expression cheap: its length, the
size of an exponent and of every intermediate result. Whatever the input, the only exception it
raises is :class:`grpo_run.ToolError` (the tools contract).
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import attrs

from grpo_run import ToolError
from grpo_run.plugins.tools.common import OneStringTool

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}


@attrs.frozen
class CalculatorConfig:
    """Options of the ``calculator`` tool."""

    max_length: int = attrs.field(default=200, validator=attrs.validators.ge(1))
    """Longest expression accepted, in characters."""
    max_exponent: int = attrs.field(default=64, validator=attrs.validators.ge(1))
    """Largest exponent of ``**``."""
    max_digits: int = attrs.field(default=100, validator=attrs.validators.ge(1))
    """Largest number of digits of any intermediate result."""


def evaluate(expression: str, config: CalculatorConfig = CalculatorConfig()) -> str:
    """The value of ``expression`` as text (``"19"``, ``"2.5"``); :class:`ToolError` for anything
    that is not plain arithmetic or breaks a limit."""
    if len(expression) > config.max_length:
        raise ToolError(f"expression longer than {config.max_length} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise ToolError(f"not an arithmetic expression: {expression!r}") from None
    value = _value(tree.body, config)
    if value.denominator == 1:
        return str(value.numerator)
    return format(float(value), ".10g")


def _value(node: ast.AST, config: CalculatorConfig) -> Fraction:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        if not math.isfinite(node.value):  # 1e309 reads as inf
            raise ToolError(f"{ast.unparse(node)[:20]} is too large")
        return _bounded(Fraction(node.value), config)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_value(node.operand, config))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left, config), _value(node.right, config)
        if isinstance(node.op, ast.Pow):
            if right.denominator != 1 or abs(right) > config.max_exponent:
                raise ToolError(f"exponents must be whole numbers up to {config.max_exponent}")
            if left == 0 and right < 0:
                raise ToolError("division by zero")
        elif isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
            raise ToolError("division by zero")
        if isinstance(node.op, ast.Div):
            return _bounded(left / right, config)
        return _bounded(Fraction(_BINARY[type(node.op)](left, right)), config)
    raise ToolError(f"unsupported in arithmetic: {type(node).__name__}")


def _bounded(value: Fraction, config: CalculatorConfig) -> Fraction:
    # Compared with 10**max_digits, not measured with str(): a power of two bounded operands can
    # reach thousands of digits, past Python's int-to-string limit (a ValueError).
    bound = 10**config.max_digits
    if abs(value.numerator) >= bound or value.denominator >= bound:
        raise ToolError(f"a result has more than {config.max_digits} digits")
    return value


class CalculatorTool(OneStringTool):
    """Evaluates an arithmetic expression exactly."""

    name = "calculator"
    Config = CalculatorConfig
    description = "Evaluate an arithmetic expression (+ - * / // % ** and parentheses) exactly."
    argument = "expression"
    argument_description = "e.g. 12*(3+4)"

    def run(self, expression: str) -> str:
        try:
            return evaluate(expression, self.config)
        except (ArithmeticError, ValueError, RecursionError, MemoryError) as exc:
            # Last line of defence: the limits above should leave nothing to catch here.
            raise ToolError(f"cannot evaluate {expression[:40]!r}: {type(exc).__name__}") from None
