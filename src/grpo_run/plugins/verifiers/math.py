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

Which answer counts when a completion has several (docs/verifiers.md): math-verify merges every
``\\boxed{}`` (and ``\\fbox{}``) of a text into one set, so a completion that corrects itself
(``\\boxed{10} ... so \\boxed{12}``) would match neither 10 nor 12. Here the answer is the *last
run of boxes*: boxes joined only by separators (spaces, ``,`` ``;`` ``&`` ``$``, LaTeX spacing,
``and`` / ``or``, ``\\text{and}``) are one answer with several parts (``\\boxed{1}, \\boxed{2}``
is the set {1, 2}); any other text between two boxes starts a new answer, and the last one
counts. When that answer is wrong and the gold is a set of several parts, every box of the text
together is tried as well (``\\boxed{(3, 3)} for part (a) and \\boxed{(1, 1)}``): it is right only
when the union of the boxes is exactly the gold set, so hedging with extra boxes still fails. In
non-strict mode a final-answer sentence after the last box (Minerva's ``Final Answer: The final
answer is $10,455$.``) counts instead of any box. A last box that is cut off (unbalanced braces)
is no answer.

An answer that still has arithmetic to do is no answer when the gold is a number: math-verify
evaluates what it extracts, so ``"8 - 2 ="`` (the question restated) or ``"The final answer is
73 - 37."`` would equal 6 and 36. A policy learns exactly that: SmolLM2-135M, trained on
``chain_sum`` with such a verifier, went from answering to restating the sum in 15 steps
(docs/real-model.md). So when the gold parses to a plain number, an extracted answer with a
binary operator between two numbers (``+ - * ^ \\times \\cdot \\div``) scores 0 (it is still
"found"); a sign, a fraction (``1/2``, ``\\frac{1}{2}``), a decimal or a percentage is a value.
``allow_expressions = true`` restores math-verify's own verdict.
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

_BOXED = "\\boxed{"
_BOX_OPENERS = (_BOXED, "\\fbox{")
"""What math-verify reads as a box (and merges when there are several)."""


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

        gold_parsed = parse_gold(gold)
        answer = self._answer_text(completion)
        predicted = parse(answer, parsing_timeout=None) if answer is not None else []
        if not predicted:
            return 0.0, 0.0
        if not self.config.allow_expressions and _is_plain_number(gold) and _UNEVALUATED.search(str(predicted[-1])):
            return 0.0, 1.0  # "8 - 2": arithmetic left to do, not a value
        correct = verify(gold_parsed, predicted, timeout_seconds=None)
        if not correct and _has_parts(gold_parsed):
            every = self._every_box(completion)
            if every is not None and every != answer:
                correct = verify(gold_parsed, parse(every, parsing_timeout=None), timeout_seconds=None)
        return (1.0 if correct else 0.0), 1.0

    def _every_box(self, completion: str) -> str | None:
        """Every box of the answer text as one answer (math-verify's merge), when the answer came
        from boxes: the one-box-per-part answer whose parts prose separates."""
        blocks = [] if self.config.strict else _ANSWER_BLOCK.findall(completion)
        text = blocks[-1] if blocks else completion
        spans = _box_spans(text)
        if not spans or (not self.config.strict and _FINAL_ANSWER.search(text, spans[-1][2])):
            return None
        return _join_boxes(text, spans)

    def _answer_text(self, completion: str) -> str | None:
        """The text to parse the answer from (see the module docstring)."""
        if self.config.strict:
            return final_boxes(completion)
        # R1-style completions: the answer block, when there is one, is the answer.
        blocks = _ANSWER_BLOCK.findall(completion)
        text = blocks[-1] if blocks else completion
        spans = _box_spans(text)
        if spans is None:
            return None
        if not spans:
            return text
        tail = text[spans[-1][1] :]
        if _FINAL_ANSWER.search(tail):
            return tail  # a final-answer sentence after the last box
        return _join_boxes(text, _last_run(text, spans))


_ANSWER_BLOCK = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_UNEVALUATED = re.compile(r"[\d.)}]\s*(?:[-+*^×·÷]|\\times|\\cdot|\\div)\s*[-+]?\s*[\d.({]")
"""A binary operator between two numbers in the text math-verify extracted (its last element)."""
_BOX_OPENER = re.compile(r"\\(?:boxed|fbox)\{")
_FINAL_ANSWER = re.compile(r"final answer.{0,100}?\s+is", re.IGNORECASE | re.DOTALL)
"""math-verify's own anchor for a final-answer sentence ("The final answer is $x$")."""
_SEPARATOR = re.compile(
    r"(?:\s|[,;&$]|\\[,;:! ]|\\q?quad\b|\\\\|\\text\{\s*(?:(?:and|or|,)\s*)?\}|\band\b|\bor\b)*",
    re.IGNORECASE,
)
"""What may stand between two boxes of one answer: spaces, punctuation that lists, math
delimiters, LaTeX spacing and line breaks, and the words "and" / "or"."""


def _box_spans(text: str) -> list[tuple[int, int, int]] | None:
    """``(start, content_start, end)`` of each outermost box of ``text`` with balanced braces, in
    order; None when a box is not closed (a cut-off answer)."""
    spans: list[tuple[int, int, int]] = []
    position = 0
    while (match := _BOX_OPENER.search(text, position)) is not None:
        depth = 0
        for i in range(match.end() - 1, len(text)):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    spans.append((match.start(), match.end(), i + 1))
                    position = i + 1
                    break
        else:
            return None
    return spans


def _last_run(text: str, spans: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """The last boxes of ``spans`` that only separators join."""
    first = len(spans) - 1
    while first > 0 and _SEPARATOR.fullmatch(text, spans[first - 1][2], spans[first][0]):
        first -= 1
    return spans[first:]


def _join_boxes(text: str, run: list[tuple[int, int, int]]) -> str:
    """``\\boxed{a}, \\boxed{b}``: one answer of every part of ``run`` (math-verify merges them)."""
    return ", ".join(_BOXED + text[content : end - 1] + "}" for _, content, end in run)


def final_boxes(text: str) -> str | None:
    """The last run of boxes of ``text`` as ``\\boxed{...}`` parts (see the module docstring);
    None when there is no box or the last one is cut off."""
    spans = _box_spans(text)
    return _join_boxes(text, _last_run(text, spans)) if spans else None


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

    if _BOXED in gold or "$" in gold:
        candidates = (gold,)
    else:
        candidates = (f"{_BOXED}{gold}}}", f"${gold}$", gold)
    for text in candidates:
        parsed = parse(text, parsing_timeout=None)
        if parsed:
            return parsed
    raise ValueError(f"math-verify cannot parse the ground truth {gold!r}")


@lru_cache(maxsize=8192)
def _is_plain_number(gold: str) -> bool:
    """Whether the gold parses to a single number (``19``, ``-6``, ``0.5``, ``1/2``), not an
    expression such as ``2\\pi``, ``1 + \\sqrt{2}`` or ``x^2`` that an answer may restate."""
    import sympy

    first = parse_gold(gold)[0]
    if not isinstance(first, sympy.Basic) or not first.is_number:
        return False
    try:
        return bool(sympy.nsimplify(first).is_Rational)
    except (TypeError, ValueError, sympy.SympifyError):
        return False


def last_boxed(text: str) -> str | None:
    """The last ``\\boxed{...}`` (or ``\\fbox{...}``) of ``text`` with balanced braces, written as
    ``\\boxed{...}``; None when there is none or the last one is not closed."""
    start, opener = max((text.rfind(o), o) for o in _BOX_OPENERS)
    if start < 0:
        return None
    depth = 0
    for i in range(start + len(opener) - 1, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return _BOXED + text[start + len(opener) : i + 1]
    return None


class _DropDisabledTimeoutWarning(logging.Filter):
    """math-verify warns once per process that its timeout is off; here that is deliberate."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Timeout is disabled" not in record.getMessage()


def _silence_disabled_timeout_warning() -> None:
    for name in ("math_verify.parser", "math_verify.grader"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropDisabledTimeoutWarning) for f in logger.filters):
            logger.addFilter(_DropDisabledTimeoutWarning())
