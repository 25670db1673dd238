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


@cache
def load_library() -> Library:
    """Import the checker modules of if-verifiable without datasets and without the network."""
    with _LOCK, _without_package_init(_PACKAGE), _refuse_nltk_downloads():
        common = importlib.import_module(f"{_PACKAGE}.common")
        ifeval = importlib.import_module(f"{_PACKAGE}.ifeval.instructions_registry")
        ifbench = importlib.import_module(f"{_PACKAGE}.ifbench.instructions_registry")
        ifbench_util = importlib.import_module(f"{_PACKAGE}.ifbench.instructions_util")
    _seed_langdetect()
    return Library(
        ifeval_checkers=types.MappingProxyType(dict(ifeval.INSTRUCTION_DICT)),
        ifbench_checkers=types.MappingProxyType(dict(ifbench.INSTRUCTION_DICT)),
        loose_variants=common.get_loose_transformations,
        split_into_sentences=ifbench_util.split_into_sentences,
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
