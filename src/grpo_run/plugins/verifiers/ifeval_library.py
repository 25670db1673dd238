"""Loads the constraint checkers of `if-verifiable <https://pypi.org/project/if-verifiable/>`_ offline.

Importing ``if_verifiable`` the ordinary way does two things a reward worker must not do:

* its ``__init__`` imports its dataset API and with it ``datasets`` (pandas, pyarrow: about
  0.6 s and 130 MB per worker process) although scoring needs none of it;
* ``if_verifiable.ifbench.instructions_util`` calls ``nltk.download(...)`` at import time for
  punkt, punkt_tab, the perceptron tagger and the stopwords corpus whenever they are missing,
  i.e. it reaches for the network.

:func:`load_library` therefore imports only the checker modules (``ifeval``, ``ifbench``,
``common``) under a placeholder parent package that is removed again afterwards, with
``nltk.download`` replaced by a refusal for the duration of the import. The checkers that would
need the missing NLTK data are replaced in :mod:`grpo_run.plugins.verifiers.ifeval_offline`.

``langdetect`` (used by ``language:response_language`` and the two ``change_case:english_*``
checkers) is randomised unless seeded; the seed is fixed here so that a reward is a function of
the completion alone.

The library also replaces a missing *or invalid* argument of a checker by a random one (a letter
``"ab"``, ``num_words = -5``, ``n = 0``...), so the same row scored differently from call to call.
:data:`ARGUMENTS` states, per instruction id, the arguments its checker takes and what a valid
value is; :func:`validate_arguments` checks a ground truth's kwargs against it before the library
sees them, and names the id, the argument and the value of anything wrong.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
import threading
import types
from collections.abc import Callable, Iterator, Mapping
from functools import cache
from typing import Any

import attrs

_PACKAGE = "if_verifiable"
_LOCK = threading.Lock()


@attrs.frozen
class Library:
    """The parts of if-verifiable the ``ifeval`` verifier uses."""

    ifeval_checkers: Mapping[str, type]
    """IFEval instruction id -> checker class (25 ids)."""
    ifbench_checkers: Mapping[str, type]
    """IFBench instruction id -> checker class (58 ids)."""
    loose_variants: Callable[[str], list[str]]
    """IFEval's loose-mode response variants (first/last line removed, ``*`` removed)."""
    split_into_sentences: Callable[[str], list[str]]
    """The library's regex sentence splitter (IFBench's sentence-based checkers use it)."""
    language_codes: Mapping[str, str]
    """ISO 639-1 code -> language name, the languages ``language:response_language`` accepts."""


@cache
def load_library() -> Library:
    """Import the checker modules of if-verifiable without datasets and without the network."""
    with _LOCK, _without_package_init(_PACKAGE), _refuse_nltk_downloads():
        common = importlib.import_module(f"{_PACKAGE}.common")
        ifeval = importlib.import_module(f"{_PACKAGE}.ifeval.instructions_registry")
        ifbench = importlib.import_module(f"{_PACKAGE}.ifbench.instructions_registry")
        ifbench_util = importlib.import_module(f"{_PACKAGE}.ifbench.instructions_util")
        ifeval_util = importlib.import_module(f"{_PACKAGE}.ifeval.instructions_util")
    _seed_langdetect()
    return Library(
        ifeval_checkers=types.MappingProxyType(dict(ifeval.INSTRUCTION_DICT)),
        ifbench_checkers=types.MappingProxyType(dict(ifbench.INSTRUCTION_DICT)),
        loose_variants=common.get_loose_transformations,
        split_into_sentences=ifbench_util.split_into_sentences,
        language_codes=types.MappingProxyType(dict(ifeval_util.LANGUAGE_CODES)),
    )


@contextlib.contextmanager
def _refuse_nltk_downloads() -> Iterator[None]:
    """Make ``nltk.download`` report failure without touching the network, then restore it."""
    import nltk

    original = nltk.download

    def refuse(*args: Any, **kwargs: Any) -> bool:
        return False

    nltk.download = refuse
    try:
        yield
    finally:
        nltk.download = original


@contextlib.contextmanager
def _without_package_init(name: str) -> Iterator[None]:
    """Let submodules of ``name`` be imported without running ``name/__init__.py``.

    A bare package module with the real ``__path__`` stands in for the parent while the
    submodules import; it is removed afterwards so that a later ``import if_verifiable`` (for its
    dataset API, say) still runs the real ``__init__``. When the real package is already imported
    nothing is replaced.
    """
    if name in sys.modules:
        yield
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.submodule_search_locations is None:
        raise ModuleNotFoundError(
            f"the ifeval verifier needs the {name!r} package: pip install 'if-verifiable>=0.1.2,<0.2'",
            name=name,
        )
    placeholder = types.ModuleType(name)
    placeholder.__path__ = list(spec.submodule_search_locations)
    placeholder.__spec__ = spec
    sys.modules[name] = placeholder
    try:
        yield
    finally:
        if sys.modules.get(name) is placeholder:
            del sys.modules[name]


def _seed_langdetect() -> None:
    from langdetect import DetectorFactory

    DetectorFactory.seed = 0


# --------------------------------------------------------------------------------------------
# Argument rules (stricter than the library, which draws a random value for an invalid one)
# --------------------------------------------------------------------------------------------


class _Invalid(Exception):
    """An argument value breaks its rule; the message says what a valid value is."""


Rule = Callable[[Any], Any]
"""Checks one argument value and returns the value to build the checker with (or raises _Invalid)."""

RELATIONS = ("less than", "at least")
"""The comparisons IFEval's count constraints take."""


def _count(minimum: int) -> Rule:
    def rule(value: Any) -> int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # 3.0 from a JSON that went through pandas is still 3
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise _Invalid(f"must be an integer >= {minimum}")
        return value

    return rule


def _percentage(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 100:
        raise _Invalid("must be a number from 0 to 100")
    return value


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _Invalid("must be a non-blank string")
    return value


def _texts(value: Any) -> list[str]:
    if (
        not isinstance(value, (list, tuple))
        or not value
        or not all(isinstance(item, str) and item.strip() for item in value)
    ):
        raise _Invalid("must be a non-empty list of non-blank strings")
    return list(value)


def _choice(*options: str) -> Rule:
    def rule(value: Any) -> str:
        if not isinstance(value, str) or value not in options:
            raise _Invalid(f"must be one of {', '.join(map(repr, options))}")
        return value

    return rule


def _character(value: Any) -> str:
    # Any single character: IFEval's prompts count '#' and '!' too (the checker is fixed to keep it).
    if not isinstance(value, str) or len(value) != 1:
        raise _Invalid("must be one character")
    return value


def _language(value: Any) -> str:
    codes = load_library().language_codes
    if not isinstance(value, str) or value not in codes:
        raise _Invalid(f"must be one of IFEval's language codes: {', '.join(sorted(codes))}")
    return value


_relation = _choice(*RELATIONS)
_COUNT, _POSITION = _count(0), _count(1)

ARGUMENTS: Mapping[str, Mapping[str, Rule]] = types.MappingProxyType(
    {
        # IFEval
        "keywords:existence": {"keywords": _texts},
        "keywords:frequency": {"keyword": _text, "frequency": _COUNT, "relation": _relation},
        "keywords:forbidden_words": {"forbidden_words": _texts},
        "keywords:letter_frequency": {"letter": _character, "let_frequency": _COUNT, "let_relation": _relation},
        "language:response_language": {"language": _language},
        "length_constraints:number_sentences": {"num_sentences": _COUNT, "relation": _relation},
        "length_constraints:number_paragraphs": {"num_paragraphs": _COUNT},
        "length_constraints:number_words": {"num_words": _COUNT, "relation": _relation},
        "length_constraints:nth_paragraph_first_word": {
            "num_paragraphs": _POSITION,
            "nth_paragraph": _POSITION,
            "first_word": _text,
        },
        "detectable_content:number_placeholders": {"num_placeholders": _COUNT},
        "detectable_content:postscript": {"postscript_marker": _text},
        "detectable_format:number_bullet_lists": {"num_bullets": _COUNT},
        "detectable_format:number_highlighted_sections": {"num_highlights": _COUNT},
        "detectable_format:multiple_sections": {"section_spliter": _text, "num_sections": _COUNT},
        "combination:repeat_prompt": {"prompt_to_repeat": _text},
        "startend:end_checker": {"end_phrase": _text},
        "change_case:capital_word_frequency": {"capital_frequency": _COUNT, "capital_relation": _relation},
        # IFBench
        "count:word_count_range": {"min_words": _COUNT, "max_words": _COUNT},
        "count:unique_word_count": {"N": _COUNT},
        "ratio:stop_words": {"percentage": _percentage},
        "count:conjunctions": {"small_n": _COUNT},
        "count:person_names": {"N": _COUNT},
        "ratio:overlap": {"reference_text": _text, "percentage": _percentage},
        "count:numbers": {"N": _COUNT},
        "format:options": {"options": _text},
        "count:words_japanese": {"N": _POSITION},  # every N-th word; 0 would divide by zero
        "words:repeats": {"small_n": _COUNT},
        "sentence:keyword": {"word": _text, "N": _POSITION},
        "count:pronouns": {"N": _COUNT},
        "sentence:increment": {"small_n": _COUNT},
        "format:list": {"sep": _text},
        "count:keywords_multiple": {f"keyword{i}": _text for i in range(1, 6)},
        "words:keywords_specific_position": {"keyword": _text, "n": _POSITION, "m": _POSITION},
        "words:words_position": {"keyword": _text},
        "repeat:repeat_change": {"prompt_to_repeat": _text},
        "repeat:repeat_span": {"prompt_to_repeat": _text, "n_start": _COUNT, "n_end": _POSITION},
    }
)
"""Instruction id -> its arguments and their rules; every argument is required. An id that is not
here takes no arguments (the ``custom:*`` checkers accept any and ignore them: an error here)."""

_ORDERED: Mapping[str, tuple[str, str, bool]] = {
    "length_constraints:nth_paragraph_first_word": ("nth_paragraph", "num_paragraphs", False),
    "count:word_count_range": ("min_words", "max_words", False),
    "repeat:repeat_span": ("n_start", "n_end", True),
}
"""Instruction id -> (lower, upper, strict): ``kwargs[lower] <= kwargs[upper]`` (``<`` when strict)."""


def validate_arguments(instruction_id: str, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The kwargs to build ``instruction_id``'s checker with; :class:`ValueError` naming the id, the
    argument and its value when one is unexpected, missing or invalid."""
    rules = ARGUMENTS.get(instruction_id, {})
    where = f"ifeval instruction {instruction_id!r}"
    for key in kwargs:
        if key not in rules:
            takes = ", ".join(rules) or "no kwargs"
            raise ValueError(f"{where}: unexpected kwarg {key}={kwargs[key]!r} (it takes {takes})")
    missing = [key for key in rules if _is_missing(kwargs.get(key))]
    if missing:
        raise ValueError(f"{where} needs kwargs {missing}, got {dict(kwargs)!r}")
    valid = {}
    for key, rule in rules.items():
        try:
            valid[key] = rule(kwargs[key])
        except _Invalid as invalid:
            raise ValueError(f"{where}: bad kwarg {key}={kwargs[key]!r}: {invalid}") from None
    if instruction_id in _ORDERED:
        lower, upper, strict = _ORDERED[instruction_id]
        if valid[upper] < valid[lower] or (strict and valid[upper] == valid[lower]):
            bound = f"{'>' if strict else '>='} {lower} ({valid[lower]!r})"
            raise ValueError(f"{where}: bad kwarg {upper}={kwargs[upper]!r}: must be {bound}")
    return valid


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, (str, list, tuple)) and len(value) == 0)
