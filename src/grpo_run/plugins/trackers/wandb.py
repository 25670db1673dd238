"""The ``wandb`` tracker: scalars per step and sample completions as W&B tables (extra
``wandb``). Offline by default: the run lands in ``<run_dir>/wandb/offline-run-*`` and can be
uploaded later with ``wandb sync``; nothing goes over the network unless ``mode = "online"``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

import attrs

from grpo_run import CompletionTrace, ConfigIssue, RunConfig
from grpo_run.plugins.trackers.common import TABLE_COLUMNS, finite_scalars, missing_package, run_config, table_rows


@attrs.frozen
class WandbConfig:
    """Options of the ``wandb`` tracker."""

    project: str = "grpo-run"
    """The W&B project the run belongs to."""
    entity: str | None = None
    """The W&B team or user owning the project; default your default entity."""
    mode: Literal["offline", "online"] = "offline"
    """``offline`` writes the run locally only; ``online`` needs ``wandb login`` and network."""
    dir: str | None = None
    """Where the ``wandb/`` folder goes; default the run directory."""
    name: str | None = None
    """The W&B run name; default the run directory's name."""
    tags: tuple[str, ...] = ()
    """Tags attached to the W&B run."""

    def check_run(self, run: RunConfig) -> list[ConfigIssue]:
        return missing_package("wandb", "wandb", "wandb")


class WandbTracker:
    """Logs every finite metric at its step (W&B's own step axis), the effective config as the
    run's config, and each rollout trace as a table ``completions/<kind>``."""

    name = "wandb"
    Config = WandbConfig

    def __init__(self, config: WandbConfig, run_dir: str) -> None:
        import wandb

        self._wandb = wandb
        directory = Path(config.dir) if config.dir else Path(run_dir)
        directory.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=config.project, entity=config.entity, mode=config.mode, dir=str(directory),
            name=config.name or Path(run_dir).name, tags=list(config.tags), config=run_config(run_dir),
            # The console belongs to grpo-run's progress display; no git probing of the run dir.
            settings=wandb.Settings(console="off", silent=True, disable_git=True, x_disable_stats=True),
        )
        self.run_path = Path(self.run.dir).parent  # .../wandb/offline-run-<time>-<id>

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        self.run.log(finite_scalars(metrics), step=step)

    def log_completions(self, step: int, kind: str, traces: Sequence[CompletionTrace]) -> None:
        table = self._wandb.Table(columns=list(TABLE_COLUMNS), data=table_rows(traces))
        self.run.log({f"completions/{kind}": table}, step=step)

    def close(self) -> None:
        self.run.finish()
