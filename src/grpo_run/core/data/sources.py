"""Where prompt rows come from: a task plugin, local files or a Hugging Face dataset.

:func:`load_prompt_set` reads the configured source and checks every row
(:func:`~grpo_run.core.data.rows.normalise_row`); tokenising is :mod:`.prompts`' job.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from grpo_run.core.config.schema import RunConfig
from grpo_run.core.data.rows import DataError, normalise_row
from grpo_run.core.plugins.families import TASK
from grpo_run.core.plugins.registry import ComponentRegistry

Row = Mapping[str, Any]


@attrs.frozen
class LoadedRows:
    """Train and eval rows of a run."""

    train: list[Row]
    eval: list[Row]


def load_rows(cfg: RunConfig, registry: ComponentRegistry) -> LoadedRows:
    """Load train/eval rows from the configured source and check every row."""
    data = cfg.data
    if cfg.task is not None:
        task = registry.get(TASK, cfg.task.name)(cfg.task.config)
        train = [{"dataset": cfg.task.name, **r} for r in task.train_rows()]
        evals = [{"dataset": cfg.task.name, **r} for r in task.eval_rows()]
        source = f"task {cfg.task.name!r}"
    elif data.train_files:
        train = [r for f in data.train_files for r in read_rows_file(f)]
        evals = [r for f in data.eval_files for r in read_rows_file(f)]
        source = ", ".join(data.train_files)
    elif data.hf_dataset:
        train, evals = _load_hf_dataset(data.hf_dataset, data.hf_train_split, data.hf_eval_split)
        source = f"dataset {data.hf_dataset!r}"
    else:  # the config invariants make this unreachable; keep the message clear anyway
        raise DataError("no prompt source: set [task], data.train_files or data.hf_dataset")
    if data.num_eval_prompts:
        evals = evals[: data.num_eval_prompts]
    enabled = list(cfg.verifiers)
    train = [normalise_row(r, i, "train", data.default_verifier, enabled) for i, r in enumerate(train)]
    evals = [normalise_row(r, i, "eval", data.default_verifier, enabled) for i, r in enumerate(evals)]
    if not train:
        raise DataError(f"{source}: no training rows")
    return LoadedRows(train=train, eval=evals)


def read_rows_file(path: str | Path) -> list[dict[str, Any]]:
    """Read rows from a ``.jsonl`` / ``.json`` (list) / ``.parquet`` file; errors name the line."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError as exc:
            raise DataError(f"{path}: reading parquet needs pyarrow (pip install 'grpo-run[data]')") from exc
        return [{"dataset": path.stem, **r} for r in pq.read_table(path).to_pylist()]
    rows: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as fh:
        if suffix == ".json":
            try:
                loaded = json.load(fh)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
            if not isinstance(loaded, list):
                raise DataError(f"{path}: expected a JSON list of rows")
            rows = [{"dataset": path.stem, **r} if isinstance(r, dict) else r for r in loaded]
        else:
            for lineno, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DataError(f"{path}:{lineno}: invalid JSON: {exc.msg}") from None
                if not isinstance(row, dict):
                    raise DataError(f"{path}:{lineno}: a row must be a JSON object")
                row.setdefault("_source", f"{path}:{lineno}")
                row.setdefault("dataset", path.stem)
                rows.append(row)
    return rows


def _load_hf_dataset(name: str, train_split: str, eval_split: str | None) -> tuple[list[Row], list[Row]]:
    try:
        import datasets
    except ImportError as exc:
        raise DataError(f"data.hf_dataset={name!r} needs the 'datasets' package: pip install 'grpo-run[data]'") from exc
    try:
        train = [{"dataset": name, **r} for r in datasets.load_dataset(name, split=train_split).to_list()]
        evals = [{"dataset": name, **r} for r in datasets.load_dataset(name, split=eval_split).to_list()] if eval_split else []
    except Exception as exc:  # network, missing split, ...: the user must act
        raise DataError(f"cannot load dataset {name!r}: {type(exc).__name__}: {exc}") from exc
    return train, evals
