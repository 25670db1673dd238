"""Worker processes that start from our own code, never from the user's main module.

A ``spawn`` child normally re-runs the parent's ``__main__`` before it unpickles anything: from
its file (``python train.py``, as ``__mp_main__``) or by module name (``python -m pkg.train``).
A user's ``train.py`` that calls ``grpo_run.train(...)`` at top level, with no
``if __name__ == "__main__":`` guard, would then train again inside every worker (and with
``overwrite=True`` remove the run's files). A ``python -`` session names a main file that does
not exist, and every child dies at start-up.

Our workers need nothing from ``__main__``: their targets live in ``grpo_run`` and what the user
wrote there (reward functions) travels by value through cloudpickle. So :func:`spawn_context`
gives a ``spawn`` context whose processes are started while ``__main__`` shows neither a file
nor a module name; the child then leaves its own ``__main__`` alone (multiprocessing's
"nothing to re-run" case, as for an interactive session) and runs only our target.
"""

from __future__ import annotations

import contextlib
import multiprocessing.context
import sys
import threading
from collections.abc import Iterator

_HIDING = threading.Lock()
"""One start at a time hides ``__main__`` (threads start scoring workers concurrently)."""


@contextlib.contextmanager
def main_hidden() -> Iterator[None]:
    """While the block runs, ``__main__`` has no ``__file__`` and a ``__spec__`` of None."""
    with _HIDING:
        main = sys.modules.get("__main__")
        if main is None:
            yield
            return
        missing = object()
        saved = {name: main.__dict__.get(name, missing) for name in ("__file__", "__spec__")}
        main.__dict__.pop("__file__", None)
        main.__dict__["__spec__"] = None
        try:
            yield
        finally:
            for name, value in saved.items():
                if value is missing:
                    main.__dict__.pop(name, None)
                else:
                    main.__dict__[name] = value


class EntryProcess(multiprocessing.context.SpawnProcess):
    """A ``spawn`` process whose child does not re-run the parent's ``__main__``."""

    def start(self) -> None:
        with main_hidden():
            super().start()


class EntryContext(multiprocessing.context.SpawnContext):
    """The ``spawn`` context of every worker process grpo-run starts."""

    Process = EntryProcess


def spawn_context() -> EntryContext:
    """A fresh ``spawn`` context whose processes never execute the user's ``__main__``."""
    return EntryContext()
