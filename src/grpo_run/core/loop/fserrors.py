"""File-system failures outside checkpoint writes, as one line each.

A run writes its directory (``config.toml``, ``log.jsonl``, ``metrics.jsonl``, ``rollouts/``,
``pipeline.json``) and its checkpoints directory. When the file system refuses -- read-only,
no permission, full -- the user gets one line naming the file and the reason, never a
traceback: :func:`file_system_error` turns the ``OSError`` into a :class:`UserError` (exit 2:
choose another directory) or a :class:`RunError` (exit 1: the disk filled up). Checkpoint writes
have their own message (:mod:`.checkpoint`).

:func:`check_writable` probes a directory before the first step, so a read-only
``checkpoint.dir`` is found before anything trains, not when the first checkpoint is due.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from grpo_run.core.errors import RunError, UserError

_FULL = {errno.ENOSPC, errno.EDQUOT}
_REFUSED = {errno.EROFS: "read-only file system", errno.EACCES: "permission denied", errno.EPERM: "not permitted"}
FS_ERRNOS = _FULL | set(_REFUSED)
"""Errors that say the file system refused a write, not that grpo-run has a bug."""


def file_system_error(exc: OSError, path: Path | str, what: str) -> UserError | RunError:
    """One line for ``exc`` raised while writing ``what`` (``"the run directory"``) at ``path``."""
    if exc.errno in _FULL:
        return RunError(f"cannot write {what} {path}: no space left on device ({_free(path)} on that file system)")
    if exc.errno in _REFUSED:
        return UserError(f"cannot write {what} {path}: {_REFUSED[exc.errno]}; choose a writable directory "
                         "(--output-dir, checkpoint.dir)")
    return RunError(f"cannot write {what} {path}: {exc.strerror or exc}")


def _free(path: Path | str) -> str:
    from grpo_run.core.loop.checkpoint import human_bytes

    for candidate in (Path(path), *Path(path).parents):
        try:
            return f"{human_bytes(shutil.disk_usage(candidate).free)} free"
        except OSError:
            continue
    return "free space unknown"


@contextmanager
def writing(path: Path | str, what: str) -> Iterator[None]:
    """Turn a file-system refusal inside the block into :func:`file_system_error`."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in FS_ERRNOS:
            raise
        raise file_system_error(exc, path, what) from None


def check_writable(directory: Path, what: str) -> None:
    """Create ``directory`` if needed and write (then remove) a small file in it; raises the
    :func:`file_system_error` of the first refusal."""
    with writing(directory, what):
        directory.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".grpo-run-probe.", dir=directory)
        try:
            os.write(fd, b"probe")
        finally:
            os.close(fd)
            os.unlink(probe)


def write_text_atomically(path: Path, text: str, what: str) -> None:
    """Write ``path`` through a temporary file renamed into place; on a refusal the temporary
    file is removed and :func:`file_system_error` raised (``path`` keeps its old content)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with writing(path, what):
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
