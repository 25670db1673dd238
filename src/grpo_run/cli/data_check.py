"""``grpo-run check``'s look at the data: every source read, mapped, transformed and checked as
training would, and the sampler built on the rows -- everything knowable without the model."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from grpo_run.core.config.schema import RunConfig
from grpo_run.core.data.rows import DataError
from grpo_run.core.data.sources import LoadedRows, load_rows
from grpo_run.core.plugins.families import SAMPLER
from grpo_run.core.plugins.registry import ComponentRegistry


def check_data(cfg: RunConfig, registry: ComponentRegistry) -> LoadedRows:
    """Load every row (raising :class:`DataError` naming the file and line of the first bad one)
    and build the sampler on the training rows (a mixture naming a source with no rows fails here)."""
    rows = load_rows(cfg, registry)
    try:
        registry.get(SAMPLER, cfg.sampler.name)(cfg.sampler.config, rows.train, cfg.run.seed)
    except (ValueError, TypeError, KeyError) as exc:
        raise DataError(f"sampler {cfg.sampler.name!r} cannot use the training rows: {exc}") from None
    return rows


def print_data_summary(console: Console, rows: LoadedRows) -> None:
    """One line per source (rows read, left out by its transform, used), then the warnings."""
    for s in rows.sources:
        dropped = f", {s.dropped} left out by its transform" if s.dropped else ""
        console.print(Text(f"  {s.key} {s.label}: {s.read} rows read{dropped}, {s.used} used"), soft_wrap=True)
    for note in rows.warnings:
        console.print(Text.assemble(("warning:", "yellow"), " ", note), soft_wrap=True)
