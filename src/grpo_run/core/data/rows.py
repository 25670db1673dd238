"""Prompt rows: loading them from a task plugin, local files or a Hugging Face dataset,
checking them, and turning them into prompt token ids.

A row is a mapping with ``id``, ``messages`` (a chat, list of ``{"role", "content"}``) or
``prompt`` (plain text), ``ground_truth`` and ``verifier`` (a verifier name or a list of names,
with a matching list of ground truths).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from grpo_run.core.config.schema import RunConfig
from grpo_run.core.errors import UserError
from grpo_run.core.plugins.registry import ComponentRegistry

Row = Mapping[str, Any]


class DataError(UserError):
    """Unusable prompt data; the message names the file and line or row."""


@attrs.frozen
class PromptSet:
    """Train and eval rows of a run."""

    train: list[Row]
    eval: list[Row]


def load_prompt_set(cfg: RunConfig, registry: ComponentRegistry) -> PromptSet:
    """Load train/eval rows from the configured source and check every row."""
    data = cfg.data
    if cfg.task is not None:
        task = registry.get("task", cfg.task.name)(cfg.task.config)
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
    train = [normalise_row(r, i, "train", data.default_verifier) for i, r in enumerate(train)]
    evals = [normalise_row(r, i, "eval", data.default_verifier) for i, r in enumerate(evals)]
    if not train:
        raise DataError(f"{source}: no training rows")
    return PromptSet(train=train, eval=evals)


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


def normalise_row(row: Mapping[str, Any], index: int, split: str, default_verifier: str | None) -> dict[str, Any]:
    """Check one row and fill ``id`` and ``verifier``; errors name the row's origin."""
    where = row.get("_source") or f"{split} row {index}"
    out = dict(row)
    out.setdefault("id", f"{split}-{index}")
    if "messages" in out:
        msgs = out["messages"]
        if not isinstance(msgs, list) or not all(isinstance(m, Mapping) and "role" in m and "content" in m for m in msgs):
            raise DataError(f"{where}: 'messages' must be a list of {{role, content}} objects")
    elif "prompt" in out:
        if not isinstance(out["prompt"], str):
            raise DataError(f"{where}: 'prompt' must be a string")
    else:
        raise DataError(f"{where}: a row needs 'messages' or 'prompt'")
    if "ground_truth" not in out:
        raise DataError(f"{where}: missing 'ground_truth'")
    verifier = out.get("verifier", default_verifier)
    if verifier is None:
        raise DataError(f"{where}: missing 'verifier' (or set data.default_verifier)")
    if isinstance(verifier, list):
        gt = out["ground_truth"]
        if not isinstance(gt, list) or len(gt) != len(verifier):
            raise DataError(f"{where}: a list of verifiers needs a list of ground truths of the same length")
    elif not isinstance(verifier, str):
        raise DataError(f"{where}: 'verifier' must be a name or a list of names")
    out["verifier"] = verifier
    return out


def check_row_verifiers(rows: Sequence[Row], enabled: Sequence[str]) -> None:
    """Every verifier a row names must be enabled in the config."""
    enabled_set = set(enabled)
    for row in rows:
        names = row["verifier"] if isinstance(row["verifier"], list) else [row["verifier"]]
        for name in names:
            if name not in enabled_set:
                where = row.get("_source") or row["id"]
                raise DataError(
                    f"{where}: row asks for verifier {name!r}, which is not enabled; "
                    f"add a [verifiers.{name}] table (enabled: {', '.join(sorted(enabled_set)) or 'none'})"
                )


class PromptEncoder:
    """Turns rows into prompt token ids with the tokenizer's chat template."""

    def __init__(self, tokenizer: Any, max_prompt_tokens: int) -> None:
        self.tokenizer = tokenizer
        self.max_prompt_tokens = max_prompt_tokens

    def encode(self, row: Row) -> list[int]:
        if "messages" in row:
            text = self.tokenizer.apply_chat_template(
                list(row["messages"]), add_generation_prompt=True, tokenize=False
            )
        else:
            text = row["prompt"]
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def fits(self, row: Row) -> bool:
        return len(self.encode(row)) <= self.max_prompt_tokens


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
