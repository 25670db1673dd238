"""Atomic checkpoints in Hugging Face format (loadable by transformers and vLLM)."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch


def save_checkpoint(
    dest: Path,
    model: torch.nn.Module,
    tokenizer: Any,
    *,
    trainer_state: Mapping[str, Any] | None = None,
    info: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``model`` + ``tokenizer`` (+ optimizer/sampler/RNG state) to ``dest`` atomically.

    Everything is written to a temporary sibling directory first and renamed into place, so a
    crash never leaves a half-written checkpoint under the final name.
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
    (dest.parent / "latest").write_text(dest.name + "\n")
    return dest


def rng_state() -> dict[str, Any]:
    """Torch and Python RNG states, for exact resumption."""
    import random

    return {"torch": torch.random.get_rng_state(), "python": random.getstate()}
