"""Preparing a run directory: never reuse one by accident, clean what interrupted writes left,
and cut ``metrics.jsonl`` back to the step a resumed run continues from.

* A directory that already holds a run (its ``config.toml``, ``metrics.jsonl`` or checkpoints)
  is refused unless the run resumes (``--resume``) or starts over (``--overwrite``, which removes
  what an earlier run wrote there -- only the files grpo-run writes).
* A new run that fails before its first step (a data error, a model that does not load) leaves
  only its ``log.jsonl`` (:func:`forget_unstarted_run`), so running it again needs no ``--overwrite``.
* ``.step_<n>.*`` directories in the checkpoints directory are checkpoints whose writing was
  interrupted (each may hold a full copy of the weights): removed on every start.
* Resuming at step ``k``: lines of ``metrics.jsonl`` after step ``k`` (and a line cut short by a
  crash) belong to steps the resumed run does again; they move to ``metrics.discarded.jsonl``,
  so ``metrics.jsonl`` holds each step once.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from grpo_run.core.config.schema import RunConfig
from grpo_run.core.errors import RunError, UserError
from grpo_run.core.loop.checkpoint import LATEST, STEP_DIR, TEMP_DIR, TRAINER_STATE
from grpo_run.core.loop.fserrors import check_writable, writing
from grpo_run.core.loop.observers import METRICS_FILE

DISCARDED_METRICS = "metrics.discarded.jsonl"
RUN_FILES = ("config.toml", METRICS_FILE, "log.jsonl", DISCARDED_METRICS)
"""Files a run writes at the top of its directory."""


def default_run_dir(cfg: RunConfig) -> Path:
    return Path(cfg.run.output_dir) / cfg.run.name


def checkpoints_dir(cfg: RunConfig, run_dir: Path) -> Path:
    """Where ``step_<n>/`` checkpoints go: ``checkpoint.dir`` or ``<run_dir>/checkpoints``."""
    return Path(cfg.checkpoint.dir) if cfg.checkpoint.dir is not None else run_dir / "checkpoints"


def run_dir_of_checkpoint(checkpoint: Path) -> Path | None:
    """The run directory a checkpoint lives in (``<run>/checkpoints/step_<n>``), if it is laid out so."""
    return checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" else None


def run_dir_of_resume_path(path: str | Path) -> Path | None:
    """The run directory ``--resume PATH`` belongs to: PATH's run for a checkpoint
    (``<run>/checkpoints/step_<n>``) or a checkpoints directory, PATH itself for a run directory;
    None when the layout does not say."""
    path = Path(path)
    if (path / TRAINER_STATE).is_file():
        path = path.parent
    if path.name == "checkpoints":
        return path.parent
    if (path / "checkpoints").is_dir():
        return path
    return None


def existing_run(run_dir: Path, checkpoints: Path) -> list[str]:
    """What in ``run_dir`` shows that a run already used it (empty when nothing does)."""
    found = [name for name in ("config.toml", METRICS_FILE) if (run_dir / name).exists()]
    if _checkpoint_entries(checkpoints):
        found.append(_shown(checkpoints, run_dir) + "/")
    return found


def prepare_run_dir(run_dir: Path, checkpoints: Path, *, resume_step: int | None, overwrite: bool) -> list[str]:
    """Make ``run_dir`` ready for a run; returns notes worth showing (what was cleaned or cut).

    ``resume_step``: the step a resumed run continues from (None: a new run). Both ``run_dir``
    and ``checkpoints`` must take a file, or a one-line error says which does not (before any
    model loads: a read-only ``checkpoint.dir`` is not found when the first checkpoint is due).
    """
    created = [d for d in (run_dir, checkpoints) if not d.exists()]
    try:
        with writing(run_dir, "the run directory"):
            notes = _prepare(run_dir, checkpoints, resume_step=resume_step, overwrite=overwrite)
        check_writable(run_dir, "the run directory")
        check_writable(checkpoints, "the checkpoints directory")
    except (UserError, RunError):
        for directory in reversed(created):  # a run that cannot start leaves no empty directories
            try:
                directory.rmdir()
            except OSError:
                pass
        raise
    return notes


def _prepare(run_dir: Path, checkpoints: Path, *, resume_step: int | None, overwrite: bool) -> list[str]:
    notes: list[str] = []
    if resume_step is None:
        found = existing_run(run_dir, checkpoints)
        if found and not overwrite:
            raise UserError(
                f"{run_dir} already holds a run ({', '.join(found)}): pass --resume {run_dir} to continue it, "
                f"or --overwrite to start it again (removes that run's files), or choose another --output-dir"
            )
        if found:
            _remove_run_files(run_dir, checkpoints)
            notes.append(f"--overwrite: removed the earlier run's files in {run_dir}")
    stale = remove_stale_temp_dirs(checkpoints)
    if stale:
        notes.append(f"removed {len(stale)} unfinished checkpoint write(s) in {checkpoints}: {', '.join(stale)}")
    if resume_step is not None:
        cut = truncate_metrics(run_dir / METRICS_FILE, resume_step)
        if cut:
            notes.append(f"{METRICS_FILE}: moved {cut} line(s) after step {resume_step} to {DISCARDED_METRICS}")
    run_dir.mkdir(parents=True, exist_ok=True)
    return notes


def forget_unstarted_run(run_dir: Path) -> None:
    """Remove what marks ``run_dir`` as holding a run (its config and metrics), after a new run
    failed before a step finished; ``log.jsonl`` stays, with the failure in it."""
    for name in ("config.toml", METRICS_FILE):
        (run_dir / name).unlink(missing_ok=True)


def remove_stale_temp_dirs(checkpoints: Path) -> list[str]:
    """Delete ``.step_<n>.*`` directories (interrupted checkpoint writes); returns their names."""
    if not checkpoints.is_dir():
        return []
    removed = []
    for child in sorted(checkpoints.iterdir()):
        if TEMP_DIR.match(child.name) and child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
            removed.append(child.name)
    return removed


def truncate_metrics(path: Path, step: int) -> int:
    """Keep the lines of ``path`` up to ``step``; move the rest to ``metrics.discarded.jsonl``.

    Returns how many lines moved. A line that is not a JSON object with a ``step`` (one cut short
    by a crash) moves too.
    """
    if not path.is_file():
        return 0
    kept, dropped = [], []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            record_step = int(json.loads(line)["step"])
        except (ValueError, KeyError, TypeError):
            record_step = None
        (kept if record_step is not None and record_step <= step else dropped).append(line)
    if not dropped:
        return 0
    with (path.parent / DISCARDED_METRICS).open("a", encoding="utf-8") as fh:
        fh.write("".join(line + "\n" for line in dropped))
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
    os.replace(tmp, path)
    return len(dropped)


def _checkpoint_entries(checkpoints: Path) -> list[Path]:
    if not checkpoints.is_dir():
        return []
    return [c for c in checkpoints.iterdir() if STEP_DIR.match(c.name) or c.name == LATEST]


def _remove_run_files(run_dir: Path, checkpoints: Path) -> None:
    for name in RUN_FILES:
        (run_dir / name).unlink(missing_ok=True)
    for entry in _checkpoint_entries(checkpoints):
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def _shown(path: Path, base: Path) -> str:
    try:
        return str(path.relative_to(base))
    except ValueError:
        return str(path)

