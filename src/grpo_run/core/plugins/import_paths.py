"""Importing the module of a ``module:Class`` component name the way a user expects: a module
next to the config file, or in the working directory, is found without ``PYTHONPATH=.``.

Installed packages come first. Only when the module's top-level name cannot be imported and a
``<name>.py`` file or ``<name>/`` package sits in one of the searched directories is that
directory put at the *end* of ``sys.path`` (so it never shadows an installed package) and of
``PYTHONPATH`` (so worker processes -- spawned scoring workers, learner processes -- import it too).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType


def local_module_dir(top: str, dirs: Sequence[Path]) -> Path | None:
    """The first of ``dirs`` holding a module or package named ``top``."""
    for directory in dirs:
        if (directory / f"{top}.py").is_file() or (directory / top / "__init__.py").is_file():
            return directory.resolve()
    return None


def import_module_near(module_name: str, dirs: Sequence[Path]) -> ModuleType:
    """``importlib.import_module(module_name)``, also looking in ``dirs`` (in order) when the
    top-level module is not importable; raises what the import raised when it is nowhere."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        top = module_name.split(".")[0]
        found = local_module_dir(top, dirs) if exc.name == top else None
        if found is None:
            raise
    _append_import_dir(found)
    return importlib.import_module(module_name)


def _append_import_dir(directory: Path) -> None:
    text = str(directory)
    if text not in sys.path:
        sys.path.append(text)
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if text not in parts:
        os.environ["PYTHONPATH"] = os.pathsep.join([*parts, text])
    importlib.invalidate_caches()
