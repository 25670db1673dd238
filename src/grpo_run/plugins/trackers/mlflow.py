"""The ``mlflow`` tracker: metrics per step and sample completions as MLflow table artifacts,
in a local file store by default (extra ``mlflow``: the ``mlflow-skinny`` client suffices)."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs

from grpo_run import CompletionTrace, ConfigIssue, RunConfig
from grpo_run.plugins.trackers.common import TABLE_COLUMNS, finite_scalars, missing_package, table_rows

FILE_STORE_OPT_IN = "MLFLOW_ALLOW_FILE_STORE"
"""MLflow 3 keeps its file store in maintenance mode and refuses it unless this is "true"."""


@attrs.frozen
class MlflowConfig:
    """Options of the ``mlflow`` tracker."""

    tracking_uri: str | None = None
    """Where runs go; default the file store ``file:<run_dir>/mlruns``. Any MLflow URI works
    (``sqlite:///mlflow.db`` with the full ``mlflow`` package, ``http://host:5000``)."""
    experiment: str = "grpo-run"
    """The MLflow experiment the run is logged under (created when missing)."""
    run_name: str | None = None
    """Default: the run directory's name."""

    def check_run(self, run: RunConfig) -> list[ConfigIssue]:
        return missing_package("mlflow", "mlflow", "mlflow")


class MlflowTracker:
    """Logs every finite metric at its step (``@`` in a name becomes ``_at_``: MLflow allows
    only letters, digits, ``_ - . / `` and spaces), the effective config as an artifact, and each
    rollout trace as the table artifact ``completions/<kind>_<step>.json``."""

    name = "mlflow"
    Config = MlflowConfig

    def __init__(self, config: MlflowConfig, run_dir: str) -> None:
        from mlflow.tracking import MlflowClient

        uri = config.tracking_uri or (Path(run_dir).resolve() / "mlruns").as_uri()
        if uri.startswith("file:"):
            os.environ.setdefault(FILE_STORE_OPT_IN, "true")
        self.tracking_uri = uri
        self.client = MlflowClient(tracking_uri=uri, registry_uri=uri)
        experiment = self.client.get_experiment_by_name(config.experiment)
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(config.experiment)
        self.experiment_id = experiment_id
        self.run_id = self.client.create_run(experiment_id, run_name=config.run_name or Path(run_dir).name).info.run_id
        effective = Path(run_dir) / "config.toml"
        if effective.is_file():
            self.client.log_artifact(self.run_id, str(effective))

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(metric_key(k), v, now, step) for k, v in finite_scalars(metrics).items()]
        for start in range(0, len(batch), 1000):  # MLflow's per-request limit
            self.client.log_batch(self.run_id, metrics=batch[start : start + 1000])

    def log_completions(self, step: int, kind: str, traces: Sequence[CompletionTrace]) -> None:
        rows = table_rows(traces)
        columns = {c: [row[i] for row in rows] for i, c in enumerate(TABLE_COLUMNS)}
        self.client.log_table(self.run_id, data=columns, artifact_file=f"completions/{kind}_{step}.json")

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


def metric_key(key: str) -> str:
    """``eval/pass@4`` -> ``eval/pass_at_4``; any other character MLflow rejects becomes ``_``."""
    return re.sub(r"[^\w\-. /]", "_", key.replace("@", "_at_"))
