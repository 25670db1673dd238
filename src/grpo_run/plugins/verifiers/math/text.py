"""Answers written without a box: where the ``math`` verifier reads them differently from math-verify.

math-verify's extraction is kept, with three corrections (each a hand-written pattern, because
math-verify's own extraction cannot see the difference):

* **Mixed numbers.** math-verify reads ``2 1/2`` as 2 * 1/2 = 1 in text and as 3/2 in LaTeX; it
  is rewritten ``5/2`` (2.5) before parsing. ``2\\frac{1}{2}`` already parses as 5/2.
* **A final answer line in bare LaTeX.** math-verify reads LaTeX only between delimiters or in a
  box, so in ``The answer is 2\\pi.`` or ``#### (1, 2]`` it finds only a number (2), and in ``The
  answer is 77/63.`` it reads the full stop as a decimal point (77/63.0). When the last line of a
  completion is such an answer line and math-verify read other than its answer, the answer is the
  line's answer read as LaTeX (``$2\\pi$``). A line with words in it is left to math-verify.
* **Hedges.** In ``The answer is 12 or 13.`` math-verify takes 12, in ``either 12 or 13`` 13. When
  the number math-verify extracted is one of several joined by "or", the answer is all of them, a
  set, as with boxes joined by "or" (rule 2): no answer to a one-part question.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

from grpo_run.plugins.verifiers.math.boxes import boxed_list

_MIXED_NUMBER = re.compile(r"(?<![\w.,^/])(\d+)[ \t]+(\d+)/(\d+)(?![\w,/^]|\.\d)")
"""``2 1/2``: a whole number, one space, a fraction (rewritten only when it is proper)."""

_ANSWER_LINE = re.compile(r".*(?:\banswer\s*(?:is\b\s*:?|:)|####)(?P<answer>.*)", re.IGNORECASE)
"""A line that states the answer: ``The answer is g.``, ``Final answer: g``, ``#### g`` (the last
such phrase of the line)."""
_DELIMITED = re.compile(r"\$|\\\(|\\\[|\\boxed|\\fbox")
_WORD = re.compile(r"(?<![\\a-zA-Z])[a-zA-Z]{2,}")
"""A word (two letters or more, not a LaTeX command): prose, left to math-verify."""

_NUMBER = r"\$?[-+]?\d+(?:\.\d+)?(?:/\d+)?(?:\\?%)?\$?"
"""A number as a hedge lists it (no thousands separator: a comma separates alternatives)."""
_OR = r"(?:\bor\b|\\text\{\s*or\s*\})"
_HEDGE = re.compile(rf"{_NUMBER}(?:\s*(?:,\s*(?:{_OR}\s*)?|{_OR}\s*){_NUMBER})+", re.IGNORECASE)
"""A list of numbers (``12 or 13``, ``$12$ or $13$``, ``11, 12, or 13``); a hedge when "or" is in it."""
_HAS_OR = re.compile(_OR, re.IGNORECASE)
_HEDGE_PART = re.compile(_NUMBER)
_HEDGE_WINDOW = 160
"""Characters read on each side of the extracted number when looking for its hedge."""


def read_unboxed(text: str) -> list[Any]:
    """math-verify's parse of an answer written without a box, with the corrections above."""
    from math_verify import parse  # looked up per call, as math.py does (tests patch it)

    parsed = parse(text, parsing_timeout=None)
    extracted = str(parsed[-1]) if parsed else ""
    hedge = hedge_parts(text, extracted) if parsed else None
    if hedge is not None:
        return parse(boxed_list(hedge), parsing_timeout=None)
    latex = bare_latex_answer(text, extracted)
    reread = parse(latex, parsing_timeout=None) if latex is not None else []
    return reread or parsed


def rewrite_mixed_numbers(text: str) -> str:
    """``2 1/2`` -> ``5/2`` (a proper fraction after a whole number, one space between)."""

    def improper(match: re.Match[str]) -> str:
        whole, numerator, denominator = (int(g) for g in match.groups())
        if not 0 < numerator < denominator:
            return match.group(0)
        value = whole + Fraction(numerator, denominator)
        return f"{value.numerator}/{value.denominator}"

    return _MIXED_NUMBER.sub(improper, text)


def bare_latex_answer(text: str, extracted: str) -> str | None:
    """``$g$`` when the last line of ``text`` is a final answer line whose answer ``g`` is bare
    LaTeX (no delimiters, no words) and math-verify's ``extracted`` string is not all of it."""
    match = _ANSWER_LINE.match(text.rstrip().rpartition("\n")[2])
    if match is None:
        return None
    answer = match.group("answer").strip(" \t*:").rstrip(" \t.")
    if not answer or _DELIMITED.search(answer) or _WORD.search(answer):
        return None
    if extracted.strip() == answer:
        return None  # math-verify read the whole answer (and no more: "77/63." is 77/63.0)
    return "$" + re.sub(r"(?<!\\)%", r"\\%", answer) + "$"  # a bare % starts a LaTeX comment


def hedge_parts(text: str, extracted: str) -> list[str] | None:
    """The alternatives of the hedge (``12 or 13``) holding the last occurrence of the number
    math-verify extracted, or None when that number is not part of a hedge."""
    number = extracted.strip().rstrip(".").strip()
    if not _HEDGE_PART.fullmatch(number):
        return None
    last = None
    for last in re.finditer(rf"(?<![\d.]){re.escape(number)}(?!\d|\.\d)", text):
        pass
    if last is None:
        return None
    # Only the text around it: the pattern backtracks over a list, so a long text would cost O(n^2).
    offset = max(0, last.start() - _HEDGE_WINDOW)
    window = text[offset : last.end() + _HEDGE_WINDOW]
    for hedge in _HEDGE.finditer(window):
        inside = hedge.start() + offset <= last.start() and last.end() <= hedge.end() + offset
        if inside and _HAS_OR.search(hedge.group(0)):
            return [part.strip("$") for part in _HEDGE_PART.findall(hedge.group(0))]
    return None
