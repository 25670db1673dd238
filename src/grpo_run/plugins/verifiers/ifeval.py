"""The ``ifeval`` verifier: does the completion follow verifiable instructions?

Ground truth is in the IFEval format, as a mapping or its JSON string::

    {"instruction_id_list": ["punctuation:no_comma", "length_constraints:number_words"],
     "kwargs": [{}, {"num_words": 50, "relation": "less than"}]}

(``instruction_id`` is accepted for ``instruction_id_list``, as in Open Instruct's data; ``None``
kwargs values are dropped, as in the Hugging Face copy of IFEval.) Every id of IFEval (25) and
IFBench (58) is supported, through the checkers of `if-verifiable
<https://pypi.org/project/if-verifiable/>`_ (:mod:`.ifeval_library` loads them offline); the 7 whose
library version needs NLTK data are written by hand (:mod:`.ifeval_offline` says which and how).

The score is the fraction of constraints followed (partial credit), or with ``strict_all`` 1 only
when all are followed. IFEval's *strict* check looks at the response as it is; its *loose* check
(``loose = true``) also accepts the response without its first line, its last line, both, and/or
without ``*`` markup. A reasoning section (everything up to the last ``</think>``) is removed first
unless ``strip_thinking = false``; an empty response follows no constraint.

A broken ground truth (unknown id; missing, unexpected or invalid kwargs, such as a letter ``"ab"``
or ``num_words = -5``, which the library would silently replace by random values) raises
:class:`ValueError` naming the id, the argument and its value, so the scorer counts the row as an
error. A checker that crashes on a completion (the library has a few index errors on degenerate
text) counts as "not followed" and in ``metrics["checker_errors"]``.
"""

from __future__ import annotations

import difflib
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import attrs

from grpo_run import VerifierConfig, VerifierResult
from grpo_run.plugins.verifiers.ifeval_library import load_library, validate_arguments
from grpo_run.plugins.verifiers.ifeval_offline import checker_classes

_log = logging.getLogger(__name__)
_THINK_END = "</think>"


@attrs.frozen
class IFEvalVerifierConfig(VerifierConfig):
    """Options of the ``ifeval`` verifier (``weight`` comes from :class:`grpo_run.VerifierConfig`)."""

    strict_all: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    """All or nothing: score 1 only when every constraint is followed, else 0 (IFEval's
    prompt-level accuracy). Default: the fraction of constraints followed."""
    loose: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    """IFEval's loose evaluation: a constraint also counts as followed when it holds for the
    response without its first and/or last line or without ``*`` characters."""
    strip_thinking: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))
    """Score only the text after the last ``</think>``; a response that opens ``<think>`` and never
    closes it has no answer and follows nothing."""


@attrs.frozen
class Constraint:
    """One instruction of a ground truth."""

    instruction_id: str
    kwargs: Mapping[str, Any]


class IFEvalVerifier:
    """Scores the fraction of IFEval/IFBench constraints a completion follows.

    ``metrics``: ``constraints_total`` and ``constraints_passed`` (counts for this completion) and
    ``checker_errors`` (checkers that raised on it).
    """

    name: ClassVar[str] = "ifeval"
    Config: ClassVar[type] = IFEvalVerifierConfig

    def __init__(self, config: IFEvalVerifierConfig | None = None) -> None:
        self.config = config if config is not None else IFEvalVerifierConfig()
        checker_classes()  # import the library now: a missing package fails here, not per row

    @staticmethod
    def supported_ids() -> frozenset[str]:
        """Every instruction id this verifier can check."""
        return frozenset(checker_classes())

    def score(self, completion: str, ground_truth: Any, row: Mapping[str, Any]) -> VerifierResult:
        """Check every constraint of ``ground_truth`` on ``completion``."""
        checkers = [build_checker(constraint) for constraint in parse_ground_truth(ground_truth)]
        response = _strip_thinking(completion) if self.config.strip_thinking else completion
        response = response.strip()
        variants = _variants(response, loose=self.config.loose)
        passed = errors = 0
        for checker in checkers:
            followed, crashed = _follows(checker, variants)
            passed += followed
            errors += crashed
        total = len(checkers)
        score = float(passed == total) if self.config.strict_all else passed / total
        metrics = {
            "constraints_total": float(total),
            "constraints_passed": float(passed),
            "checker_errors": float(errors),
        }
        return VerifierResult(score=score, metrics=metrics)


def parse_ground_truth(ground_truth: Any) -> list[Constraint]:
    """The constraints of an IFEval-format ground truth (a mapping or its JSON string)."""
    if isinstance(ground_truth, (str, bytes)):
        try:
            ground_truth = json.loads(ground_truth)
        except json.JSONDecodeError as error:
            raise ValueError(f"ifeval ground truth is not valid JSON: {error}") from None
    if not isinstance(ground_truth, Mapping):
        raise TypeError(f"ifeval ground truth must be a mapping or a JSON object, got {type(ground_truth).__name__}")
    ids = ground_truth.get("instruction_id_list", ground_truth.get("instruction_id"))
    if not isinstance(ids, Sequence) or isinstance(ids, str) or not ids:
        raise ValueError(f"ifeval ground truth needs a non-empty list 'instruction_id_list', got {ids!r}")
    kwargs_list = ground_truth.get("kwargs")
    if kwargs_list is None:
        kwargs_list = [{}] * len(ids)
    if not isinstance(kwargs_list, Sequence) or len(kwargs_list) != len(ids):
        raise ValueError(f"ifeval ground truth has {len(ids)} instruction ids but kwargs {kwargs_list!r}")
    return [_constraint(instruction_id, kwargs) for instruction_id, kwargs in zip(ids, kwargs_list, strict=True)]


def _constraint(instruction_id: Any, kwargs: Any) -> Constraint:
    if not isinstance(instruction_id, str):
        raise ValueError(f"ifeval instruction id must be a string, got {instruction_id!r}")
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, Mapping):
        raise ValueError(f"ifeval kwargs of {instruction_id!r} must be a mapping, got {kwargs!r}")
    return Constraint(instruction_id, {key: value for key, value in kwargs.items() if value is not None})


def build_checker(constraint: Constraint) -> Any:
    """A library checker configured with the constraint's kwargs.

    The library fills a missing or invalid kwarg with a random value (a random word count, a
    random keyword), which would make the reward noise; the kwargs are validated first
    (:func:`.ifeval_library.validate_arguments`), so such a row is an error instead.
    """
    classes = checker_classes()
    instruction_id = constraint.instruction_id
    checker_class = classes.get(instruction_id)
    if checker_class is None:
        close = difflib.get_close_matches(instruction_id, classes, n=3)
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
        raise ValueError(f"unknown ifeval instruction id {instruction_id!r}{hint}")
    kwargs = validate_arguments(instruction_id, constraint.kwargs)
    checker = checker_class(instruction_id)
    try:
        checker.build_description(**kwargs)
    except (TypeError, ValueError) as error:  # not expected after validation: a library change
        raise ValueError(f"ifeval instruction {instruction_id!r}: bad kwargs {kwargs!r}: {error}") from None
    return checker


def _strip_thinking(text: str) -> str:
    if _THINK_END in text:
        return text.rsplit(_THINK_END, 1)[1]
    if text.lstrip().startswith("<think>"):
        return ""
    return text


def _variants(response: str, *, loose: bool) -> list[str]:
    """The texts a constraint may hold on: the response, or all of IFEval's loose variants."""
    if not response:
        return []
    if not loose:
        return [response]
    return [variant for variant in load_library().loose_variants(response) if variant.strip()]


def _follows(checker: Any, variants: list[str]) -> tuple[bool, bool]:
    """(followed on some variant, crashed on some variant)."""
    crashed = False
    for variant in variants:
        try:
            if checker.check_following(variant):
                return True, crashed
        except Exception:  # a checker that crashes on odd text has not seen its rule followed
            _log.debug("ifeval checker %s raised on a response", checker.id, exc_info=True)
            crashed = True
    return False, crashed
