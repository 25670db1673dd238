"""The ``math`` verifier: is the completion's final answer mathematically equal to the gold one?

Built on Hugging Face's `math-verify <https://github.com/huggingface/Math-Verify>`_: ``parse``
extracts an answer and turns it into a SymPy object, ``verify`` compares two parsed answers
(``1/2 == 0.5 == \\frac{1}{2}``, ``19 == 19.0``, sets, intervals, symbolic expressions).

math-verify's own timeouts use ``signal.alarm``, which fails outside the main thread, so they are
turned off here (``parsing_timeout=None``, ``timeout_seconds=None``); the scoring runtime bounds the
time of each call by killing the worker process instead.

Extraction from the completion (non-strict): math-verify's default LaTeX + plain-expression
extraction, which prefers anchored answers ("final answer is", ``\\boxed{}``, "answer:") and
otherwise takes the last number or LaTeX expression, so ``"19"`` and ``"I think 19."`` both give 19.
When the completion has an ``<answer>...</answer>`` block (R1 format), only the last such block
is searched. Strict mode only accepts boxed answers (the last run of boxes, below).

The rules, numbered as in docs/verifiers.md, each in the module that applies it:

* which box is the answer (rules 2-4): ``boxes`` -- the last run of boxes, every box for a
  several-part gold, and a final-answer sentence after the last box (here);
* answers without a box (rules 7-9): ``text`` -- mixed numbers, hedges, a final answer line
  in bare LaTeX;
* arithmetic left to do (rule 6): ``arithmetic`` -- when the gold is a plain number, an answer
  whose compared part (the last right-hand side of an equation or chain) is still a sum, product,
  power or ``\\div`` scores 0 (it is still "found"). ``allow_expressions = true`` turns it off.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, ClassVar

import attrs
import cachetools

from grpo_run import VerifierConfig, VerifierResult
from grpo_run.plugins.verifiers.math.boxes import BOXED, box_spans, final_boxes, join_boxes, last_boxed, last_run

__all__ = ["MathVerifier", "MathVerifierConfig", "final_boxes", "last_boxed", "parse_gold"]



@attrs.frozen
class MathVerifierConfig(VerifierConfig):
    """Options of the ``math`` verifier (``weight`` comes from :class:`grpo_run.VerifierConfig`)."""

    strict: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    """Only accept an answer written as ``\\boxed{...}`` (the last run of boxes); otherwise any
    answer that math-verify extracts (a final-answer sentence, boxed, anchored phrases, the last
    number or expression)."""
    allow_expressions: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    """Accept an answer that is still arithmetic on numbers (``8 - 2``, ``3 \\times 4``) when the
    gold is a number, as math-verify does. Off by default: a policy learns to restate the
    question instead of answering it."""
    cache_size: int = attrs.field(default=65536, validator=[attrs.validators.instance_of(int), attrs.validators.ge(0)])
    """Entries of the per-process LRU cache (``cachetools.LRUCache``, picklable) of verdicts keyed
    by (completion, ground truth); 0 disables it. RL batches repeat completions a lot (G samples of
    a short answer)."""


class MathVerifier:
    """Scores 1.0 when the extracted answer equals the ground truth (per math-verify), else 0.0.

    The ground truth is a string (``"19"``, ``"\\frac{1}{2}"``, ``"x^2"``) or a number. A ground
    truth that cannot be parsed raises :class:`ValueError` (a broken dataset row: the scorer counts
    and logs it with the row id). ``metrics["answer_found"]`` is 1.0 when an answer was extracted
    from the completion (a format signal), else 0.0.
    """

    name: ClassVar[str] = "math"
    Config: ClassVar[type] = MathVerifierConfig

    def __init__(self, config: MathVerifierConfig | None = None) -> None:
        self.config = config if config is not None else MathVerifierConfig()
        size = self.config.cache_size
        self._cache: cachetools.LRUCache[tuple[str, str], tuple[float, float]] | None = (
            cachetools.LRUCache(maxsize=size) if size > 0 else None
        )
        _silence_disabled_timeout_warning()
        import math_verify  # noqa: F401  (sympy: loaded when a verifier is built, not in its first timed call)

    def score(self, completion: str, ground_truth: Any, row: Mapping[str, Any]) -> VerifierResult:
        """Compare the answer extracted from ``completion`` with ``ground_truth``."""
        gold = _gold_text(ground_truth)
        key = (completion, gold)
        verdict = self._cache.get(key) if self._cache is not None else None
        if verdict is None:
            verdict = self._check(completion, gold)
            if self._cache is not None:
                self._cache[key] = verdict
        score, answer_found = verdict
        return VerifierResult(score=score, metrics={"answer_found": answer_found})

    def _check(self, completion: str, gold: str) -> tuple[float, float]:
        """(score, answer_found) of one completion."""
        from math_verify import parse, verify  # not at the top: sympy costs `grpo-run check` ~1 s

        from grpo_run.plugins.verifiers.math.arithmetic import has_arithmetic_left
        from grpo_run.plugins.verifiers.math.text import rewrite_mixed_numbers

        gold_parsed = parse_gold(gold)
        text = rewrite_mixed_numbers(completion)
        predicted, boxes = self._answer(text)
        if not predicted:
            return 0.0, 0.0
        if not self.config.allow_expressions and _is_plain_number(gold) and has_arithmetic_left(predicted):
            return 0.0, 1.0  # "8 - 2": arithmetic left to do, not a value
        correct = verify(gold_parsed, predicted, timeout_seconds=None)
        if not correct and _has_parts(gold_parsed):
            every = self._every_box(text)
            if every is not None and every != boxes:
                correct = verify(gold_parsed, parse(every, parsing_timeout=None), timeout_seconds=None)
        return (1.0 if correct else 0.0), 1.0

    def _every_box(self, text: str) -> str | None:
        """Every box of the answer text as one answer (math-verify's merge), when the answer came
        from boxes: the one-box-per-part answer whose parts prose separates."""
        blocks = [] if self.config.strict else _ANSWER_BLOCK.findall(text)
        text = blocks[-1] if blocks else text
        spans = box_spans(text)
        if not spans or (not self.config.strict and _FINAL_ANSWER.search(text, spans[-1][2])):
            return None
        return join_boxes(text, spans)

    def _answer(self, text: str) -> tuple[list[Any], str | None]:
        """The parsed answer of ``text`` (see the module docstring), and the boxes it was read
        from (None when it was not read from boxes)."""
        from math_verify import parse

        from grpo_run.plugins.verifiers.math.text import read_unboxed

        if self.config.strict:
            boxes = final_boxes(text)
            return (parse(boxes, parsing_timeout=None) if boxes else []), boxes
        # R1-style completions: the answer block, when there is one, is the answer.
        blocks = _ANSWER_BLOCK.findall(text)
        text = blocks[-1] if blocks else text
        spans = box_spans(text)
        if spans is None:
            return [], None
        if spans and not _FINAL_ANSWER.search(text, spans[-1][1]):
            boxes = join_boxes(text, last_run(text, spans))
            return parse(boxes, parsing_timeout=None), boxes
        tail = text[spans[-1][1] :] if spans else text  # a final-answer sentence after the last box
        return read_unboxed(tail), None


_ANSWER_BLOCK = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_FINAL_ANSWER = re.compile(r"final answer.{0,100}?\s+is", re.IGNORECASE | re.DOTALL)
"""math-verify's own anchor for a final-answer sentence ("The final answer is $x$")."""


def _has_parts(gold_parsed: list[Any]) -> bool:
    """Whether the gold is a set of several parts (``(2, 2), (6, 2)``; ``x = 1, y = 2``)."""
    first = gold_parsed[0] if gold_parsed else None
    return getattr(first, "is_FiniteSet", False) is True and len(first) > 1  # a SymPy FiniteSet


def _gold_text(ground_truth: Any) -> str:
    if isinstance(ground_truth, str):
        return ground_truth.strip()
    if isinstance(ground_truth, (int, float)) and not isinstance(ground_truth, bool):
        return str(ground_truth)
    raise TypeError(f"math ground truth must be a string or a number, got {type(ground_truth).__name__}")


@lru_cache(maxsize=8192)
def parse_gold(gold: str) -> list[Any]:
    """Parse a gold answer, wrapped as ``\\boxed{gold}`` unless it already carries ``$`` or a box.

    A bare gold such as ``x^2`` or ``\\sqrt{2}`` is not extracted by math-verify (it looks for a
    number or a LaTeX environment), and ``2\\pi`` would parse as ``2``; boxing makes the whole gold
    the answer. ``$gold$`` and the bare text are tried next for golds a box does not parse.
    """
    from math_verify import parse

    from grpo_run.plugins.verifiers.math.text import rewrite_mixed_numbers

    gold = rewrite_mixed_numbers(gold)
    if BOXED in gold or "$" in gold:
        candidates = (gold,)
    else:
        candidates = (f"{BOXED}{gold}}}", f"${gold}$", gold)
    for text in candidates:
        parsed = parse(text, parsing_timeout=None)
        if parsed:
            return parsed
    raise ValueError(f"math-verify cannot parse the ground truth {gold!r}")


@lru_cache(maxsize=8192)
def _is_plain_number(gold: str) -> bool:
    """Whether the gold is a plain number (rule 6 applies), not an expression (``3^{5}``, ``2\\pi``)."""
    from grpo_run.plugins.verifiers.math.arithmetic import is_plain_number

    return is_plain_number(parse_gold(gold)[0])


class _DropDisabledTimeoutWarning(logging.Filter):
    """math-verify warns once per process that its timeout is off; here that is deliberate."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Timeout is disabled" not in record.getMessage()


def _silence_disabled_timeout_warning() -> None:
    for name in ("math_verify.parser", "math_verify.grader"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropDisabledTimeoutWarning) for f in logger.filters):
            logger.addFilter(_DropDisabledTimeoutWarning())
