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
is searched. Strict mode only accepts the content of the last ``\\boxed{...}``.
"""

from __future__ import annotations

import logging
import re
from collections import OrderedDict
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, ClassVar

import attrs
from math_verify import parse, verify

from grpo_run import VerifierConfig, VerifierResult

_BOXED = "\\boxed{"


@attrs.frozen
class MathVerifierConfig(VerifierConfig):
    """Options of the ``math`` verifier (``weight`` comes from :class:`grpo_run.VerifierConfig`)."""

    strict: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    """Only accept an answer written as ``\\boxed{...}`` (the last one); otherwise any answer that
    math-verify extracts (anchored phrases, boxed, the last number or expression)."""
    cache_size: int = attrs.field(default=65536, validator=[attrs.validators.instance_of(int), attrs.validators.ge(0)])
    """Entries of the per-process LRU cache of verdicts keyed by (completion, ground truth);
    0 disables it. RL batches repeat completions a lot (G samples of a short answer)."""


class _LRU:
    """A small picklable LRU map (``functools.lru_cache`` objects do not pickle)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._data: OrderedDict[tuple[str, str], tuple[float, float]] = OrderedDict()

    def get(self, key: tuple[str, str]) -> tuple[float, float] | None:
        value = self._data.get(key)
        if value is not None:
            self._data.move_to_end(key)
        return value

    def put(self, key: tuple[str, str], value: tuple[float, float]) -> None:
        if self.capacity <= 0:
            return
        self._data[key] = value
        self._data.move_to_end(key)
        if len(self._data) > self.capacity:
            self._data.popitem(last=False)


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
        self._cache = _LRU(self.config.cache_size)
        _silence_disabled_timeout_warning()

    def score(self, completion: str, ground_truth: Any, row: Mapping[str, Any]) -> VerifierResult:
        """Compare the answer extracted from ``completion`` with ``ground_truth``."""
        gold = _gold_text(ground_truth)
        key = (completion, gold)
        verdict = self._cache.get(key)
        if verdict is None:
            verdict = self._check(completion, gold)
            self._cache.put(key, verdict)
        score, answer_found = verdict
        return VerifierResult(score=score, metrics={"answer_found": answer_found})

    def _check(self, completion: str, gold: str) -> tuple[float, float]:
        """(score, answer_found) of one completion."""
        gold_parsed = parse_gold(gold)
        if self.config.strict:
            boxed = last_boxed(completion)
            predicted = parse(boxed, parsing_timeout=None) if boxed is not None else []
        else:
            # R1-style completions: the answer block, when there is one, is the answer.
            answer = _ANSWER_BLOCK.findall(completion)
            predicted = parse(answer[-1] if answer else completion, parsing_timeout=None)
        if not predicted:
            return 0.0, 0.0
        correct = verify(gold_parsed, predicted, timeout_seconds=None)
        return (1.0 if correct else 0.0), 1.0


_ANSWER_BLOCK = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


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
    if _BOXED in gold or "$" in gold:
        candidates = (gold,)
    else:
        candidates = (f"{_BOXED}{gold}}}", f"${gold}$", gold)
    for text in candidates:
        parsed = parse(text, parsing_timeout=None)
        if parsed:
            return parsed
    raise ValueError(f"math-verify cannot parse the ground truth {gold!r}")


def last_boxed(text: str) -> str | None:
    """The last ``\\boxed{...}`` of ``text`` with balanced braces, or None when there is none."""
    start = text.rfind(_BOXED)
    if start < 0:
        return None
    depth = 0
    for i in range(start + len(_BOXED) - 1, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start : i + 1]
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
