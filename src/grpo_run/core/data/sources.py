"""Where prompt rows come from: a task plugin, or the ``data.train`` / ``data.eval`` sources.

:func:`load_rows` reads each source (:mod:`.readers`), maps its columns and applies its transform
(:mod:`.rows`), checks every row (:func:`~grpo_run.core.data.rows.normalise_row`) and mixes the
sources (:mod:`.mixer`). It needs no model, so ``grpo-run check`` runs it too. Tokenising is
:mod:`.prompts`' job.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from grpo_run.core.config.data_sections import DataSource
from grpo_run.core.config.schema import RunConfig
from grpo_run.core.data.mixer import take_rows, target_count
from grpo_run.core.data.readers import read_source
from grpo_run.core.data.rows import ColumnMap, DataError, map_columns, normalise_row
from grpo_run.core.errors import PluginError
from grpo_run.core.plugins.abilities import ShapingConfig
from grpo_run.core.plugins.families import TASK, TRANSFORM
from grpo_run.core.plugins.registry import ComponentRegistry

Row = Mapping[str, Any]
RowCheck = Callable[[Row, str], dict[str, Any]]
""":func:`normalise_row` with the run's verifier settings: (row, where) -> the checked row."""


@attrs.frozen
class SourceSummary:
    """What one source gave: rows read, rows its transform left out, rows it contributes."""

    key: str
    """``data.train[0]``, ``data.eval[1]`` or ``task``."""
    label: str
    read: int
    dropped: int
    used: int


@attrs.frozen
class LoadedRows:
    """Train and eval rows of a run, with what each source gave and warnings for the console."""

    train: list[Row]
    eval: list[Row]
    sources: list[SourceSummary] = attrs.Factory(list)
    warnings: list[str] = attrs.Factory(list)
    origins: dict[int, str] = attrs.Factory(dict)
    """Where each row came from (``train.jsonl:3``), by ``id()`` of the row objects above."""

    def where(self, row: Row) -> str:
        """``file:line`` (or ``file row N``, ``task 'x' train row N``) of one of these rows."""
        return self.origins.get(id(row), f"row {row.get('id')!r}")


def load_rows(cfg: RunConfig, registry: ComponentRegistry) -> LoadedRows:
    """Load, map, transform, check and mix the rows of the configured sources."""
    every_row = any(isinstance(c, ShapingConfig) and c.all_rows for c in cfg.verifiers.values())
    check: RowCheck = functools.partial(normalise_row, enabled=list(cfg.verifiers), scores_every_row=every_row,
                                        row_verifiers=cfg.scoring.row_verifiers)
    origins: dict[int, str] = {}
    if cfg.task is not None:
        task = registry.get(TASK, cfg.task.name)(cfg.task.config)
        train = _task_rows(task.train_rows(), cfg.task.name, "train", check, origins)
        evals = _task_rows(task.eval_rows(), cfg.task.name, "eval", check, origins)
        summaries = [SourceSummary("task", cfg.task.name, len(train), 0, len(train))]
    else:
        train, summaries = _mix("data.train", cfg.data.train, cfg, registry, check, origins)
        evals, eval_summaries = _mix("data.eval", cfg.data.eval, cfg, registry, check, origins)
        summaries += eval_summaries
    if not train:
        raise DataError("no training rows: every data.train source is empty or filtered out by its transform")
    warnings = [f"{s.key} ({s.label}) has no rows" for s in summaries if s.key.startswith("data.eval") and s.used == 0]
    if cfg.data.eval and not evals and cfg.train.local_eval_every:
        warnings.append("no eval rows, so evaluation is off (train.local_eval_every is ignored)")
    elif cfg.task is None and not cfg.data.eval and cfg.train.local_eval_every:
        warnings.append("no [[data.eval]] source, so evaluation is off (no eval/accuracy); add one to evaluate")
    return LoadedRows(train=train, eval=evals, sources=summaries, warnings=warnings, origins=origins)


def _task_rows(rows: Sequence[Row], name: str, split: str, check: RowCheck,
               origins: dict[int, str]) -> list[Row]:
    out = []
    for i, row in enumerate(rows):
        fields = {"dataset": name, **row}
        fields.setdefault("id", f"{name}-{split}-{i}")
        where = f"task {name!r} {split} row {i}"
        out.append(check(fields, where))
        origins[id(out[-1])] = where
    return out


def _mix(
    key: str, sources: Sequence[DataSource], cfg: RunConfig, registry: ComponentRegistry, check: RowCheck,
    origins: dict[int, str],
) -> tuple[list[Row], list[SourceSummary]]:
    rows: list[Row] = []
    summaries = []
    for position, source in enumerate(sources):
        where = f"{key}[{position}]"
        loaded = _source_rows(source, registry, check, origins)
        read, kept = loaded
        count = target_count(len(kept), source.weight, source.rows)
        if count > 0 and not kept:
            raise DataError(f"{where} ({source.label}): no rows to take {count} from")
        if count == 0 and kept:
            raise DataError(f"{where} ({source.label}): weight {source.weight} of {len(kept)} rows gives no rows")
        used = take_rows(kept, count, cfg.data.seed, position)
        summaries.append(SourceSummary(where, source.label, read, read - len(kept), len(used)))
        rows.extend(used)
    return rows, summaries


def _source_rows(source: DataSource, registry: ComponentRegistry, check: RowCheck,
                 origins: dict[int, str]) -> tuple[int, list[Row]]:
    """(rows read, rows kept after the transform), each mapped and checked."""
    columns = ColumnMap(
        dataset=source.label, prompt_key=source.prompt_key, messages_key=source.messages_key,
        ground_truth_key=source.ground_truth_key, verifier=source.verifier, verifier_key=source.verifier_key,
        id_key=source.id_key, system_prompt=source.system_prompt,
    )
    transform = None
    if source.transform is not None:
        transform = registry.get(TRANSFORM, source.transform.name)(source.transform.config)
    raw = read_source(source)
    kept = []
    for index, item in enumerate(raw):
        row: Mapping[str, Any] | None = map_columns(item.fields, columns, index, item.where)
        if transform is not None:
            row = _transformed(transform, source.transform.name, row, item.where)  # type: ignore[union-attr]
            if row is None:
                continue
        kept.append(check(row, item.where))
        origins[id(kept[-1])] = item.where
    return len(raw), kept


def _transformed(transform: Any, name: str, row: Mapping[str, Any], where: str) -> Mapping[str, Any] | None:
    """The transform's result; its ``ValueError`` is a data error, anything else a plugin defect,
    both naming the row and the transform."""
    try:
        out = transform(dict(row))
    except (ValueError, TypeError, KeyError) as exc:
        raise DataError(f"{where}: transform {name!r}: {exc}") from None
    except Exception as exc:  # a bug in the transform's own code
        raise PluginError(f"{where}: transform {name!r} raised {type(exc).__name__}: {exc}") from exc
    if out is not None and not isinstance(out, Mapping):
        raise PluginError(f"{where}: transform {name!r} returned {type(out).__name__}, expected a row (a mapping) or None")
    return out
