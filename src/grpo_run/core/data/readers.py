"""Reading the raw rows of one data source: local files, saved ``datasets`` and hub datasets.

Every reader returns :class:`RawRow` items: the row as the source has it plus where it came from
(``file:line`` for text formats, ``file row N`` for tables), so a later error names the place.
Every failure to read is a :class:`~grpo_run.core.data.rows.DataError` naming the file (and line
where there is one): bytes that are not UTF-8, a ``.parquet`` that is not parquet, a CSV named
``.jsonl``, a directory that is not a saved dataset.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs

from grpo_run.core.config.data_sections import DataSource
from grpo_run.core.data.rows import DataError

FORMATS_BY_SUFFIX = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".parquet": "parquet", ".csv": "csv"}


@attrs.frozen
class RawRow:
    """A row as its source has it, and where it is (``train.jsonl:3``, ``data.parquet row 0``)."""

    where: str
    fields: Mapping[str, Any]


def read_source(source: DataSource) -> list[RawRow]:
    """Every row of ``source`` (a local file or directory, or a hub dataset)."""
    if source.hf_dataset is not None:
        return _read_hub(source)
    assert source.path is not None  # DataSource guarantees one of path / hf_dataset
    path = Path(source.path)
    if path.is_dir():
        return _read_saved_dataset(path, source.split)
    if not path.exists():
        raise DataError(f"{path}: no such file")
    fmt = source.format if source.format != "auto" else FORMATS_BY_SUFFIX.get(path.suffix.lower())
    if fmt is None:
        known = ", ".join(sorted(FORMATS_BY_SUFFIX))
        raise DataError(f"{path}: unknown file type {path.suffix!r} (known: {known}); set the source's format")
    if source.split is not None:
        raise DataError(f"{path}: 'split' applies to a hub dataset or a saved dataset directory, not to a file")
    return {"jsonl": read_jsonl, "json": read_json, "parquet": read_parquet, "csv": read_csv}[fmt](path)


def _decoded_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line; bytes that are not UTF-8 are an error naming the line."""
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise DataError(f"{path}: cannot read: {exc.strerror or exc}") from None
    with fh:
        for lineno, raw in enumerate(fh, start=1):
            try:
                yield lineno, raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(
                    f"{path}:{lineno}: not UTF-8 text (byte {exc.start + 1} of the line is {raw[exc.start]:#04x}); "
                    "re-encode the file as UTF-8"
                ) from None


def read_jsonl(path: Path) -> list[RawRow]:
    """One JSON object per line (blank lines skipped)."""
    rows = []
    for lineno, line in _decoded_lines(path):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{lineno}: invalid JSON: {exc.msg}{_csv_hint(path, lineno, line)}") from None
        if not isinstance(value, dict):
            raise DataError(f"{path}:{lineno}: a row must be a JSON object, got {type(value).__name__}")
        rows.append(RawRow(f"{path}:{lineno}", value))
    return rows


def _csv_hint(path: Path, lineno: int, line: str) -> str:
    """A CSV file given as JSON lines fails on its header line: say what it looks like."""
    if lineno == 1 and "," in line and not line.lstrip().startswith(("{", "[")):
        return f"; this looks like CSV: CSV is supported, name the file .csv or set format = \"csv\" for {path.name}"
    return ""


def read_json(path: Path) -> list[RawRow]:
    """A JSON array of objects; a file of JSON lines named ``.json`` is read as JSON lines."""
    text = "".join(line for _, line in _decoded_lines(path))
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":  # several documents: JSON lines in a .json file
            return read_jsonl(path)
        raise DataError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}{_csv_hint(path, exc.lineno, text)}") from None
    if not isinstance(value, list):
        raise DataError(f"{path}: expected a JSON array of rows, got {type(value).__name__}")
    rows = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise DataError(f"{path} row {i}: a row must be a JSON object, got {type(item).__name__}")
        rows.append(RawRow(f"{path} row {i}", item))
    return rows


def read_csv(path: Path) -> list[RawRow]:
    """A CSV file with a header line; every value is a string (the header names the columns)."""
    lines = (line for _, line in _decoded_lines(path))
    reader = csv.DictReader(lines)
    rows = []
    try:
        for record in reader:
            extra = record.pop(None, None)  # type: ignore[call-overload]
            if extra:
                raise DataError(f"{path}:{reader.line_num}: {len(extra)} more values than the header has columns")
            missing = [name for name, value in record.items() if value is None]  # DictReader's fill for a short row
            if missing:
                raise DataError(f"{path}:{reader.line_num}: the row has {len(record) - len(missing)} of the "
                                f"header's {len(record)} columns (no value for {', '.join(map(repr, missing))})")
            rows.append(RawRow(f"{path}:{reader.line_num}", record))
    except csv.Error as exc:
        raise DataError(f"{path}:{reader.line_num}: invalid CSV: {exc}") from None
    if reader.fieldnames is None:
        raise DataError(f"{path}: empty CSV file (no header line)")
    return rows


def read_parquet(path: Path) -> list[RawRow]:
    """A parquet table; each row a mapping of its columns."""
    try:
        import pyarrow
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise DataError(f"{path}: reading parquet needs pyarrow (pip install 'grpo-run[data]')") from exc
    try:
        table = pq.read_table(path)
    except (pyarrow.ArrowException, OSError) as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DataError(f"{path}: not a readable parquet file ({first_line})") from None
    return [RawRow(f"{path} row {i}", row) for i, row in enumerate(table.to_pylist())]


def _datasets_module(what: str) -> Any:
    try:
        import datasets
    except ImportError as exc:
        raise DataError(f"{what} needs the 'datasets' package: pip install 'grpo-run[data]'") from exc
    return datasets


def _read_saved_dataset(path: Path, split: str | None) -> list[RawRow]:
    """A directory written by ``Dataset.save_to_disk`` or ``DatasetDict.save_to_disk``."""
    datasets = _datasets_module(f"{path} (a saved dataset directory)")
    try:
        loaded = datasets.load_from_disk(str(path))
    except FileNotFoundError as exc:
        raise DataError(f"{path}: a directory, but not one written by datasets' save_to_disk ({exc})") from None
    if isinstance(loaded, datasets.DatasetDict):
        splits = sorted(loaded)
        if split is None and len(splits) == 1:
            split = splits[0]
        if split not in loaded:
            raise DataError(f"{path}: a saved DatasetDict; set the source's split to one of: {', '.join(splits)}")
        loaded = loaded[split]
    elif split is not None:
        raise DataError(f"{path}: a saved Dataset has no splits; remove split = {split!r}")
    where = f"{path}[{split}]" if split is not None else str(path)
    return [RawRow(f"{where} row {i}", row) for i, row in enumerate(loaded.to_list())]


def _read_hub(source: DataSource) -> list[RawRow]:
    """A hub dataset, through ``datasets.load_dataset`` (its cache first; the hub when reachable)."""
    name, split = source.hf_dataset, source.split or "train"
    datasets = _datasets_module(f"hf_dataset = {name!r}")
    try:
        loaded = datasets.load_dataset(name, source.subset, split=split)
    except Exception as exc:  # no network, no such dataset / subset / split: the user must act
        detail = " ".join(str(exc).split())[:300]
        raise DataError(f"cannot load hub dataset {name!r} (subset {source.subset!r}, split {split!r}): "
                        f"{type(exc).__name__}: {detail}") from None
    label = f"{name}[{split}]"
    return [RawRow(f"{label} row {i}", row) for i, row in enumerate(loaded.to_list())]
