"""``<sweep dir>/sweep.json``: what a sweep is -- its config, its overrides, its variations -- and
each variant's name, values, run directory and status, rewritten (atomically) whenever a variant
starts or ends. ``grpo-run sweep --resume`` and ``grpo-run report`` read it."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import attrs
import cattrs

from grpo_run.core.errors import UserError
from grpo_run.core.loop.fserrors import write_text_atomically

if TYPE_CHECKING:  # the report reads sweep.json without the config machinery
    from grpo_run.core.sweep.variants import Variant

SWEEP_FILE = "sweep.json"
FORMAT = 1

Status = Literal["pending", "running", "completed", "failed", "interrupted"]


@attrs.define
class VariantEntry:
    name: str
    overrides: dict[str, Any]
    """The variant's values, ``{key: value}``."""
    run_dir: str
    """Its run directory, relative to the sweep's."""
    status: Status = "pending"
    reason: str | None = None
    """Why it failed or stopped (one line)."""
    step: int = 0
    """Learner steps it completed."""


@attrs.define
class SweepManifest:
    config: str | None
    """The base config's path (``None``: a config given as data, through the Python API)."""
    overrides: list[str]
    """``--set`` overrides applied to it."""
    vary: dict[str, list[Any]]
    variants: list[VariantEntry]
    format: int = FORMAT
    updated: float = 0.0

    @classmethod
    def new(cls, config: str | None, overrides: Sequence[str], vary: dict[str, list[Any]],
            variants: Sequence[Variant]) -> SweepManifest:
        entries = [VariantEntry(v.name, dict(v.overrides), v.name) for v in variants]
        return cls(config, list(overrides), {k: list(vs) for k, vs in vary.items()}, entries)

    def entry(self, name: str) -> VariantEntry:
        return next(e for e in self.variants if e.name == name)

    def write(self, directory: Path) -> None:
        self.updated = time.time()
        text = json.dumps(cattrs.unstructure(self), indent=2) + "\n"
        write_text_atomically(Path(directory) / SWEEP_FILE, text, "the sweep's sweep.json")

    @classmethod
    def read(cls, directory: Path) -> SweepManifest:
        """The sweep in ``directory``; a :class:`UserError` when there is none or it is damaged."""
        path = Path(directory) / SWEEP_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UserError(f"{directory}: not a sweep directory (no {SWEEP_FILE})") from None
        except (OSError, ValueError) as exc:
            raise UserError(f"{path}: cannot read it: {exc}") from None
        try:
            return cattrs.structure(data, cls)
        except Exception as exc:  # noqa: BLE001 -- cattrs' errors vary: one line either way
            raise UserError(f"{path}: not a sweep.json this version writes ({type(exc).__name__})") from None


def is_sweep(directory: Path) -> bool:
    return (Path(directory) / SWEEP_FILE).is_file()
