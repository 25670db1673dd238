"""Arithmetic left to do: the ``math`` verifier's rule 6, judged on what math-verify compares.

math-verify evaluates what it extracts, so ``8 - 2 =`` (the question restated) equals 6. A policy
learns exactly that (docs/real-model.md), so when the gold is a plain number an answer whose value
is still arithmetic scores 0. The rule reads math-verify's own parse -- a SymPy tree that keeps the
operations as written (``8 - 2`` is ``Add(8, Mul(-1, 2))``) -- of the part that math-verify
compares with a number gold: the whole answer, or for an equation or a chain (``9 \\times 6 =
54``, ``x = 12 - 5 = 7``) the right-hand side of the last ``=``.

Values, not arithmetic: a number, a sign, a fraction (``1/2``; LaTeX fractions of numbers arrive
evaluated), a percentage, scientific notation (``d \\times 10^{k}``, 1 <= |d| < 10), a mixed number, a
root or function of a number (``\\sqrt{4}``), and what math-verify strips before it parses (degrees,
units, thousands separators). Arithmetic: a sum or difference, a product, a power (``10^{6}``
too), and ``\\div`` (which latex2sympy evaluates as it parses, so it is read from the text).
"""

from __future__ import annotations

import re
from typing import Any

import sympy
from math_verify.grader import is_equation, take_last_relation

_PERCENT = sympy.UnevaluatedExpr(sympy.Rational(1, 100))
"""How latex2sympy writes ``%``: ``50\\%`` is ``Mul(50, UnevaluatedExpr(1/100))``."""
_DIVISION = re.compile(r"\\div(?![a-zA-Z])|÷")


def compared_part(parsed: list[Any]) -> tuple[Any, str]:
    """The SymPy value and the text that math-verify compares with a gold that is not an
    equation: the last right-hand side of an equation or chain, else the whole answer."""
    value, text = parsed[0], str(parsed[-1])
    if isinstance(value, sympy.Basic) and is_equation(value):
        return take_last_relation(value).rhs, text.rpartition("=")[2]
    return value, text


def has_arithmetic_left(parsed: list[Any]) -> bool:
    """Whether the answer that math-verify parsed as ``parsed`` still has arithmetic to do in the
    part it compares with a plain-number gold (``8 - 2``, ``\\boxed{40+2}``, ``2^{10}``)."""
    value, text = compared_part(parsed)
    return _unevaluated(value) or bool(_DIVISION.search(text))


def _unevaluated(expr: Any) -> bool:
    if not isinstance(expr, sympy.Basic) or expr.is_Atom or _is_value(expr):
        return False
    if isinstance(expr, (sympy.Add, sympy.Mul)):
        return True
    if isinstance(expr, sympy.Pow) and expr.exp.is_Number and not _is_root(expr):
        return True  # 2^{10}
    return any(_unevaluated(arg) for arg in expr.args)  # sets, tuples, intervals, roots, functions


def _is_value(expr: sympy.Basic) -> bool:
    """A number as people write one: signed, a fraction, a percentage, scientific notation."""
    if expr.is_Number:
        return True
    if not isinstance(expr, sympy.Mul):
        return False
    factors = list(expr.args)
    if sympy.S.NegativeOne in factors:
        factors.remove(sympy.S.NegativeOne)  # a sign
    if len(factors) == 1:
        return factors[0].is_Number or _is_reciprocal(factors[0])  # -6; -1/2 in plain text
    numbers = [f for f in factors if f.is_Number]
    others = [f for f in factors if not f.is_Number]
    if len(numbers) != 1 or len(others) != 1:
        return False
    (number,), (other,) = numbers, others
    if other == _PERCENT or _is_reciprocal(other):
        return True  # 12.5\%; 84/2 in plain text
    return _is_power_of_ten(other) and 1 <= abs(number) < 10  # 2.5 \times 10^{4}


def _is_root(expr: sympy.Pow) -> bool:
    """``\\sqrt{4}``, ``\\sqrt[3]{8}``: a value of its base (a rational exponent that is no integer)."""
    return bool(expr.exp.is_Rational and not expr.exp.is_Integer)


def _is_reciprocal(expr: sympy.Basic) -> bool:
    return isinstance(expr, sympy.Pow) and expr.exp == -1 and expr.base.is_Number


def _is_power_of_ten(expr: sympy.Basic) -> bool:
    return isinstance(expr, sympy.Pow) and expr.base == 10 and expr.exp.is_Integer


def is_plain_number(value: Any) -> bool:
    """Whether a parsed gold is a single rational number written as a value (``19``, ``-6``,
    ``0.5``, ``1/2``, ``50\\%``, ``2.5 \\times 10^{4}``), not an expression that an answer may
    restate (``3^{5}``, ``2\\pi``, ``1 + \\sqrt{2}``, ``x^2``)."""
    if not isinstance(value, sympy.Basic) or not value.is_number or _unevaluated(value):
        return False
    try:
        return bool(sympy.nsimplify(value.doit()).is_Rational)
    except (TypeError, ValueError, sympy.SympifyError):
        return False
