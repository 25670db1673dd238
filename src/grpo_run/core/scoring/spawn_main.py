"""Starting ``spawn`` worker processes from a program without a main file (``python -``,
``python -c``, a notebook, an embedded interpreter).

A ``spawn`` child re-runs the parent's ``__main__`` from its file before it unpickles anything.
``python -`` sets ``__main__.__file__`` to ``"<stdin>"``, a file that does not exist, so every child
dies at start-up ("a scoring worker could not start its verifiers"). The workers need nothing from
``__main__`` -- functions defined there travel by value (cloudpickle, see
:mod:`grpo_run.api.reward_functions`) -- so while such a child starts, ``__main__`` is presented
without its file and the child skips re-running it.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

@contextlib.contextmanager
def main_without_missing_file() -> Iterator[None]:
    """Hide ``__main__.__file__`` while a child starts, when it names no existing file."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    spec_name = getattr(getattr(main, "__spec__", None), "name", None)
    if main is None or path is None or spec_name is not None or os.path.isfile(path):
        yield
        return
    del main.__file__
    try:
        yield
    finally:
        main.__file__ = path
