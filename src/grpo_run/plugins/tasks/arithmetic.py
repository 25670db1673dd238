"""Procedurally generated arithmetic problems (``12+7`` -> ``19``), the embedded default's task.

Every problem ``a <op> b`` with operands in ``0..max_operand`` is enumerated once, shuffled with
``seed``, and split: the first ``num_eval`` problems are the held-out eval set, the rest are the
train set, so no eval problem ever appears in training. Subtraction only uses ``a >= b`` (no
negative answers). The defaults are the task the shipped ``tiny-arithmetic`` checkpoint was
warm-started on.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import attrs

OPERATIONS: dict[str, Callable[[int, int], int]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
}
"""Supported operators and how to compute them."""

MAX_PROBLEMS = 1_000_000
"""Largest problem space enumerated (all operand pairs x operations)."""


def _check_operations(instance: Any, attribute: attrs.Attribute, value: tuple[str, ...]) -> None:
    if not value:
        raise ValueError("operations must name at least one operator")
    unknown = [op for op in value if op not in OPERATIONS]
    if unknown:
        raise ValueError(f"unknown operations {unknown}; supported: {sorted(OPERATIONS)}")
    if len(set(value)) != len(value):
        raise ValueError(f"operations has duplicates: {list(value)}")


@attrs.frozen
class ArithmeticConfig:
    """Options of the ``arithmetic`` task."""

    operations: tuple[str, ...] = attrs.field(default=("+",), converter=tuple, validator=_check_operations)
    """Operators to draw problems from: any of ``"+"``, ``"-"``, ``"*"``."""
    max_operand: int = attrs.field(
        default=49, validator=[attrs.validators.instance_of(int), attrs.validators.ge(1)]
    )
    """Operands range over ``0..max_operand`` (inclusive)."""
    num_eval: int = attrs.field(default=200, validator=[attrs.validators.instance_of(int), attrs.validators.ge(0)])
    """Number of held-out eval problems (never in the train set)."""
    seed: int = attrs.field(default=0, validator=attrs.validators.instance_of(int))
    """Seed of the shuffle that orders problems and picks the eval set."""

    def __attrs_post_init__(self) -> None:
        total = _num_problems(self.operations, self.max_operand)
        if total > MAX_PROBLEMS:
            raise ValueError(f"{total} problems exceed the limit of {MAX_PROBLEMS}; lower max_operand")
        if self.num_eval >= total:
            raise ValueError(f"num_eval ({self.num_eval}) must be below the number of problems ({total})")


def _num_problems(operations: tuple[str, ...], max_operand: int) -> int:
    n = max_operand + 1
    return sum(n * (n + 1) // 2 if op == "-" else n * n for op in operations)


def enumerate_problems(operations: tuple[str, ...], max_operand: int) -> list[tuple[int, str, int]]:
    """Every ``(a, op, b)`` problem of the space, in a fixed order (subtraction keeps ``a >= b``)."""
    rng = range(max_operand + 1)
    return [(a, op, b) for op in operations for a in rng for b in rng if op != "-" or a >= b]


def problem_row(row_id: str, a: int, op: str, b: int) -> dict[str, Any]:
    """The standard row for ``a <op> b``: a one-turn chat and the exact answer as ground truth."""
    return {
        "id": row_id,
        "messages": [{"role": "user", "content": f"{a}{op}{b}"}],
        "ground_truth": str(OPERATIONS[op](a, b)),
        "verifier": "math",
    }


class ArithmeticTask:
    """Arithmetic problems scored by the ``math`` verifier; eval problems are held out of training."""

    name = "arithmetic"
    Config = ArithmeticConfig

    def __init__(self, config: ArithmeticConfig) -> None:
        self.config = config
        problems = enumerate_problems(config.operations, config.max_operand)
        random.Random(config.seed).shuffle(problems)
        self._eval = problems[: config.num_eval]
        self._train = problems[config.num_eval :]

    def train_rows(self) -> list[dict[str, Any]]:
        """All problems not held out, in a seed-determined order."""
        return [problem_row(f"arith-train-{i}", *p) for i, p in enumerate(self._train)]

    def eval_rows(self) -> list[dict[str, Any]]:
        """The ``num_eval`` held-out problems."""
        return [problem_row(f"arith-eval-{i}", *p) for i, p in enumerate(self._eval)]
