"""Atomic checkpoints in Hugging Face format (loadable by transformers and vLLM), and finding and
reading them back to resume a run.

A checkpoint directory ``step_<n>/`` holds the model and tokenizer (Hugging Face format),
``trainer_state.pt`` (optimizer, schedule, sampler, RNG, step; see ``core/train.py``) and
``grpo_run.json``; its parent holds a ``latest`` file naming the newest one.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from grpo_run.core.errors import UserError

TRAINER_STATE = "trainer_state.pt"
LATEST = "latest"
_STEP_DIR = re.compile(r"^step_(\d+)$")


def save_checkpoint(
    dest: Path,
    model: torch.nn.Module,
    tokenizer: Any,
    *,
    trainer_state: Mapping[str, Any] | None = None,
    info: Mapping[str, Any] | None = None,
    write_extra: Callable[[Path], None] | None = None,
) -> Path:
    """Write ``model`` + ``tokenizer`` (+ optimizer/sampler/RNG state) to ``dest`` atomically.

    Everything is written to a temporary sibling directory first and renamed into place, so a
    crash never leaves a half-written checkpoint under the final name. ``write_extra`` writes
    more into that directory before the rename (a LoRA run's merged model).
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        if trainer_state is not None:
            torch.save(dict(trainer_state), tmp / "trainer_state.pt")
        if info is not None:
            (tmp / "grpo_run.json").write_text(json.dumps(dict(info), indent=2, default=str))
        if write_extra is not None:
            write_extra(tmp)
        old = None
        if dest.exists():
            old = dest.with_name(f".{dest.name}.old")
            if old.exists():
                shutil.rmtree(old)
            dest.rename(old)
        tmp.rename(dest)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    (dest.parent / LATEST).write_text(dest.name + "\n")
    return dest


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


def find_checkpoint(path: str | Path) -> Path:
    """The checkpoint to resume from, given a checkpoint, a checkpoints directory or a run directory.

    A directory holding ``trainer_state.pt`` is itself the checkpoint; otherwise the newest one
    under ``<path>`` or ``<path>/checkpoints`` (its ``latest`` file, else the highest
    ``step_<n>``). Anything else is a :class:`UserError` saying what was looked for.
    """
    path = Path(path)
    if not path.exists():
        raise UserError(f"--resume {path}: no such file or directory")
    if (path / TRAINER_STATE).is_file():
        return path
    for parent in (path, path / "checkpoints"):
        found = _newest_in(parent)
        if found is not None:
            return found
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


def _newest_in(directory: Path) -> Path | None:
    if not directory.is_dir():
        return None
    latest = directory / LATEST
    if latest.is_file():
        named = directory / latest.read_text().strip()
        if (named / TRAINER_STATE).is_file():
            return named
    steps = [
        (int(m.group(1)), child)
        for child in directory.iterdir()
        if (m := _STEP_DIR.match(child.name)) and (child / TRAINER_STATE).is_file()
    ]
    return max(steps)[1] if steps else None


def _as_random_state(state: Any) -> tuple:
    """``random.setstate`` wants tuples; a round trip through some loaders gives lists."""
    version, internal, gauss = state
    return (version, tuple(internal), gauss)
