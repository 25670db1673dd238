"""Which ``\\boxed{}`` of a completion is its answer (the ``math`` verifier's rules 2-3).

math-verify merges every ``\\boxed{}`` (and ``\\fbox{}``) of a text into one set, so a completion
that corrects itself (``\\boxed{10} ... so \\boxed{12}``) would match neither 10 nor 12. Here the
answer is the *last run of boxes*: boxes joined only by separators (spaces, ``,`` ``;`` ``&`` ``$``,
LaTeX spacing, ``and`` / ``or``, ``\\text{and}``) are one answer with several parts (``\\boxed{1},
\\boxed{2}`` is the set {1, 2}); any other text between two boxes starts a new answer, and the last
one counts. A last box that is cut off (unbalanced braces) is no answer.
"""

from __future__ import annotations

import re

BOXED = "\\boxed{"
_BOX_OPENERS = (BOXED, "\\fbox{")
"""What math-verify reads as a box (and merges when there are several)."""
_BOX_OPENER = re.compile(r"\\(?:boxed|fbox)\{")
_SEPARATOR = re.compile(
    r"(?:\s|[,;&$]|\\[,;:! ]|\\q?quad\b|\\\\|\\text\{\s*(?:(?:and|or|,)\s*)?\}|\band\b|\bor\b)*",
    re.IGNORECASE,
)
"""What may stand between two boxes of one answer: spaces, punctuation that lists, math
delimiters, LaTeX spacing and line breaks, and the words "and" / "or"."""

Span = tuple[int, int, int]
"""``(start, content_start, end)`` of one box in its text."""


def box_spans(text: str) -> list[Span] | None:
    """The spans of the outermost boxes of ``text`` with balanced braces, in order; None when a
    box is not closed (a cut-off answer)."""
    spans: list[Span] = []
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


def last_run(text: str, spans: list[Span]) -> list[Span]:
    """The last boxes of ``spans`` that only separators join."""
    first = len(spans) - 1
    while first > 0 and _SEPARATOR.fullmatch(text, spans[first - 1][2], spans[first][0]):
        first -= 1
    return spans[first:]


def join_boxes(text: str, run: list[Span]) -> str:
    """``\\boxed{a}, \\boxed{b}``: one answer of every part of ``run`` (math-verify merges them)."""
    return ", ".join(BOXED + text[content : end - 1] + "}" for _, content, end in run)


def boxed_list(parts: list[str]) -> str:
    """``\\boxed{a}, \\boxed{b}`` of the texts ``parts``: a set to math-verify."""
    return ", ".join(BOXED + part + "}" for part in parts)


def final_boxes(text: str) -> str | None:
    """The last run of boxes of ``text`` as ``\\boxed{...}`` parts; None when there is no box or
    the last one is cut off."""
    spans = box_spans(text)
    return join_boxes(text, last_run(text, spans)) if spans else None


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
                return BOXED + text[start + len(opener) : i + 1]
    return None
