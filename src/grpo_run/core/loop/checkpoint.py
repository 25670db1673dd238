"""Atomic, verifiable checkpoints in Hugging Face format (loadable by transformers and vLLM), and
finding and reading them back to resume a run.

A checkpoint directory ``step_<n>/`` holds the model and tokenizer (Hugging Face format),
``trainer_state.pt`` (optimizer, schedule, sampler, RNG, step; see :mod:`grpo_run.core.loop.run`),
``grpo_run.json`` and ``manifest.json`` (size and SHA-256 of every other file, written last); its
parent holds a ``latest`` file naming the newest one.

Writing: everything goes to a temporary sibling ``.step_<n>.<pid>.<random>/`` that is renamed into
place when complete, so a crash never leaves a half-written checkpoint under the final name (a
stale temporary directory is removed at the next start, :mod:`grpo_run.core.loop.rundir`). The
directory and its files get the usual permissions for the umask (``mkdtemp``'s 0700 and
safetensors' 0600 would hide them from a separate inference-server account). A write that fails because the disk is full raises
:class:`CheckpointWriteError`, one line with the path and the free space; ``latest`` still names
the previous checkpoint. Weights that are not finite (a NaN or inf in any tensor of the written
model) are never made a checkpoint: the write is abandoned with
:class:`NonFiniteWeightsError`, ``latest`` still names the previous checkpoint, and the run stops
(a policy that is not finite only generates garbage; see docs/reliability.md).

Reading: :func:`find_checkpoint` checks a checkpoint against its manifest and, given a run or
checkpoints directory, falls back to the newest *valid* checkpoint, reporting the damaged ones.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import re
import secrets
import shutil
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

from grpo_run.core.errors import RunError, UserError

TRAINER_STATE = "trainer_state.pt"
MANIFEST = "manifest.json"
LATEST = "latest"
STEP_DIR = re.compile(r"^step_(\d+)$")
TEMP_DIR = re.compile(r"^\.step_\d+\..+$")
"""Temporary directories of checkpoint writes (and ``.step_<n>.old`` of a replaced one)."""
_LOW_SPACE = 64 * 2**20
"""Free space under which a failed write is taken for a full disk whatever the error says
(torch reports ENOSPC as "unexpected pos ...")."""


class CheckpointWriteError(RunError):
    """A checkpoint could not be written (e.g. the disk is full); the previous one is untouched."""


class NonFiniteWeightsError(CheckpointWriteError):
    """The policy to checkpoint holds NaN or inf weights: nothing was written, the previous
    checkpoint is still ``latest``."""


def save_checkpoint(
    dest: Path,
    model: torch.nn.Module,
    tokenizer: Any,
    *,
    trainer_state: Mapping[str, Any] | None = None,
    info: Mapping[str, Any] | None = None,
    write_extra: Callable[[Path], None] | None = None,
) -> Path:
    """Write ``model`` + ``tokenizer`` (+ optimizer/sampler/RNG state) to ``dest`` atomically,
    with a manifest; then point ``latest`` at it. ``write_extra`` writes more into the directory
    before the manifest and the rename (a LoRA run's merged model)."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{dest.name}.{os.getpid()}.{secrets.token_hex(4)}"
    try:
        tmp.mkdir()  # mode 0o777 & ~umask, like any directory the user makes
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        if trainer_state is not None:
            torch.save(dict(trainer_state), tmp / TRAINER_STATE)
        if info is not None:
            (tmp / "grpo_run.json").write_text(json.dumps(dict(info), indent=2, default=str))
        if write_extra is not None:
            write_extra(tmp)
        poisoned = nonfinite_tensors(tmp)
        if poisoned:
            raise NonFiniteWeightsError(_nonfinite_problem(dest, poisoned))
        _readable_like(tmp)
        write_manifest(tmp)
        old = None
        if dest.exists():
            old = dest.with_name(f".{dest.name}.old")
            if old.exists():
                shutil.rmtree(old)
            dest.rename(old)
        tmp.rename(dest)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        _write_atomically(dest.parent / LATEST, dest.name + "\n")
    except BaseException as exc:
        full = isinstance(exc, Exception) and not isinstance(exc, NonFiniteWeightsError)
        problem = _disk_full_problem(exc, dest, tmp) if full else None
        shutil.rmtree(tmp, ignore_errors=True)
        if problem is not None:
            raise CheckpointWriteError(problem) from exc
        raise
    return dest


def nonfinite_tensors(directory: Path) -> dict[str, int]:
    """``{"<file>:<tensor>": number of NaN/inf values}`` over every ``*.safetensors`` file under
    ``directory`` (the model as written, whoever gathered it); empty when all are finite. Reads
    one tensor at a time."""
    from safetensors import safe_open

    out: dict[str, int] = {}
    for path in sorted(directory.rglob("*.safetensors")):
        with safe_open(str(path), framework="pt") as fh:
            for name in fh.keys():
                tensor = fh.get_tensor(name)
                if tensor.is_floating_point() and tensor.numel() and not _finite(tensor):
                    out[f"{path.relative_to(directory)}:{name}"] = int(tensor.numel() - torch.isfinite(tensor).sum())
    return out


def _finite(tensor: torch.Tensor) -> bool:
    """Whether every value is finite: max and min propagate NaN and reach +-inf. Two reductions
    allocate nothing, where ``isfinite(t)`` makes a copy of every tensor (several times slower)."""
    return bool(torch.isfinite(tensor.amax())) and bool(torch.isfinite(tensor.amin()))


def _nonfinite_problem(dest: Path, poisoned: Mapping[str, int]) -> str:
    first = next(iter(poisoned))
    latest = dest.parent / LATEST
    previous = latest.read_text().strip() if latest.is_file() else None
    kept = f"{previous} is still the latest checkpoint" if previous else "no earlier checkpoint exists"
    return (
        f"checkpoint {dest} not written: the policy's weights are not finite (NaN or inf in {len(poisoned)} "
        f"tensor{'s' if len(poisoned) != 1 else ''}, first {first}: {poisoned[first]} values); {kept}; a policy that is not finite only generates "
        f"garbage, so the run stops"
    )


def write_manifest(directory: Path) -> None:
    """Record the size and SHA-256 of every file under ``directory`` in its ``manifest.json``."""
    files = {str(path.relative_to(directory)): _describe(path) for path in _files(directory)}
    (directory / MANIFEST).write_text(json.dumps({"files": files}, indent=1, sort_keys=True))


def verify_checkpoint(checkpoint: Path) -> str | None:
    """What is wrong with ``checkpoint`` (a missing, truncated or altered file), or None if it is
    complete. Without a manifest (written by an older grpo-run), the trainer state must exist and
    every ``*.safetensors`` header must parse."""
    checkpoint = Path(checkpoint)
    if not (checkpoint / TRAINER_STATE).is_file():
        return f"no {TRAINER_STATE}"
    manifest = checkpoint / MANIFEST
    if not manifest.is_file():
        return _check_safetensors_headers(checkpoint)
    try:
        files = json.loads(manifest.read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"{MANIFEST} is unreadable ({type(exc).__name__})"
    for name, expected in sorted(files.items()):
        path = checkpoint / name
        if not path.is_file():
            return f"{name} is missing"
        size = path.stat().st_size
        if size != expected["size"]:
            return f"{name} has {size} bytes, the manifest says {expected['size']}"
        if _sha256(path) != expected["sha256"]:
            return f"{name} does not match its SHA-256 in the manifest"
    return None


def prune_checkpoints(directory: Path, keep_last_n: int) -> list[str]:
    """Delete all but the newest ``keep_last_n`` ``step_<n>`` checkpoints in ``directory`` (never
    the one ``latest`` names); returns the names removed. ``keep_last_n = 0`` keeps all."""
    if keep_last_n <= 0 or not directory.is_dir():
        return []
    latest = (directory / LATEST).read_text().strip() if (directory / LATEST).is_file() else None
    steps = sorted((int(m.group(1)), child) for child in directory.iterdir() if (m := STEP_DIR.match(child.name)))
    removed = []
    for _, child in steps[:-keep_last_n]:
        if child.name != latest:
            shutil.rmtree(child, ignore_errors=True)
            removed.append(child.name)
    return removed


def rng_state() -> dict[str, Any]:
    """Torch and Python RNG states, for exact resumption."""
    state: dict[str, Any] = {"torch": torch.random.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: Mapping[str, Any]) -> None:
    """Undo :func:`rng_state`: the global torch (CPU, CUDA) and Python generators continue as saved."""
    torch.random.set_rng_state(state["torch"])
    random.setstate(_as_random_state(state["python"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def find_checkpoint(path: str | Path, on_damaged: Callable[[str], None] | None = None) -> Path:
    """The checkpoint to resume from, given a checkpoint, a checkpoints directory or a run directory.

    A directory holding ``trainer_state.pt`` is itself the checkpoint; it must be complete (see
    :func:`verify_checkpoint`). Otherwise the newest complete one under ``<path>`` or
    ``<path>/checkpoints`` (the one ``latest`` names first, then by step): each damaged
    checkpoint passed over is reported to ``on_damaged``. Anything else is a :class:`UserError`
    saying what was looked for.
    """
    path = Path(path)
    if not path.exists():
        raise UserError(f"--resume {path}: no such file or directory")
    if (path / TRAINER_STATE).is_file():
        problem = verify_checkpoint(path)
        if problem is not None:
            hint = _valid_sibling_hint(path)
            raise UserError(f"--resume {path}: the checkpoint is damaged: {problem}{hint}")
        return path
    damaged: list[str] = []
    for parent in (path, path / "checkpoints"):
        for candidate in _candidates(parent):
            problem = verify_checkpoint(candidate)
            if problem is None:
                for note in damaged:
                    if on_damaged is not None:
                        on_damaged(f"{note}; resuming from {candidate} instead")
                return candidate
            damaged.append(f"checkpoint {candidate} is damaged ({problem})")
    if damaged:
        raise UserError(f"--resume {path}: no complete checkpoint: " + "; ".join(damaged))
    raise UserError(
        f"--resume {path}: no checkpoint found (expected a checkpoint directory holding {TRAINER_STATE}, "
        f"or a run or checkpoints directory with step_<n>/ checkpoints)"
    )


def load_trainer_state(checkpoint: Path) -> dict[str, Any]:
    """``trainer_state.pt`` of ``checkpoint``, loaded on the CPU (tensors and plain data only)."""
    try:
        return torch.load(checkpoint / TRAINER_STATE, map_location="cpu", weights_only=True)
    except Exception as exc:  # corrupt, truncated or written by something else
        raise UserError(
            f"{checkpoint / TRAINER_STATE}: cannot read the trainer state: {type(exc).__name__}: {exc}"
        ) from exc


def _candidates(directory: Path) -> list[Path]:
    """Checkpoints in ``directory``, newest first: the one ``latest`` names, then by step."""
    if not directory.is_dir():
        return []
    steps = sorted(
        ((int(m.group(1)), child) for child in directory.iterdir()
         if (m := STEP_DIR.match(child.name)) and (child / TRAINER_STATE).is_file()),
        reverse=True,
    )
    ordered = [child for _, child in steps]
    latest = directory / LATEST
    if latest.is_file():
        named = directory / latest.read_text().strip()
        if named in ordered:
            ordered.remove(named)
            ordered.insert(0, named)
    return ordered


def _valid_sibling_hint(checkpoint: Path) -> str:
    for candidate in _candidates(checkpoint.parent):
        if candidate != checkpoint and verify_checkpoint(candidate) is None:
            return f" (the newest complete one next to it is {candidate})"
    return ""


def _files(directory: Path) -> Iterator[Path]:
    for path in sorted(directory.rglob("*")):
        if path.is_file() and path.name != MANIFEST:
            yield path


def _describe(path: Path) -> dict[str, Any]:
    return {"size": path.stat().st_size, "sha256": _sha256(path)}


def _sha256(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _check_safetensors_headers(checkpoint: Path) -> str | None:
    from safetensors import safe_open

    for path in sorted(checkpoint.glob("*.safetensors")):
        try:
            with safe_open(str(path), framework="pt") as fh:
                fh.keys()
        except Exception as exc:  # safetensors raises its own error types
            return f"{path.name} is unreadable ({exc})"
    return None


def _readable_like(directory: Path) -> None:
    """Give every file the permissions a new file gets under the umask (the directory's, without
    execute): some writers (safetensors) create 0600 files, which another account cannot read."""
    mode = directory.stat().st_mode & 0o666
    for path in directory.rglob("*"):
        if path.is_file() and not path.is_symlink():
            path.chmod(mode)


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _disk_full_problem(exc: BaseException, dest: Path, tmp: Path) -> str | None:
    """One line saying the disk is full (path, free space, what was written), or None if it is not."""
    try:
        free = shutil.disk_usage(dest.parent).free
    except OSError:
        free = None
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    says_full = any(
        (isinstance(e, OSError) and e.errno == errno.ENOSPC) or "No space left" in str(e) or "StorageFull" in str(e)
        for e in chain
    )
    if not says_full and (free is None or free >= _LOW_SPACE):
        return None
    written = sum(p.stat().st_size for p in tmp.rglob("*") if p.is_file()) if tmp.is_dir() else 0
    latest = dest.parent / LATEST
    previous = latest.read_text().strip() if latest.is_file() else None
    kept = f"; {previous} is still the latest checkpoint" if previous else "; no earlier checkpoint exists"
    space = f"{human_bytes(free)} free" if free is not None else "free space unknown"
    return (
        f"cannot write checkpoint {dest}: no space left on device ({space} on that file system, "
        f"{human_bytes(written)} of this checkpoint written){kept}"
    )


def human_bytes(count: int | float) -> str:
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def _as_random_state(state: Any) -> tuple:
    """``random.setstate`` wants tuples; a round trip through some loaders gives lists."""
    version, internal, gauss = state
    return (version, tuple(internal), gauss)
