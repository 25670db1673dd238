"""The tracker plugins, read back with each tool's own reader: TensorBoard's EventAccumulator,
W&B's transaction-log reader (``wandb leet inspect``) and MLflow's client on its file store."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from support.runs import write_run
from support.verifiers import DIGIT_SHARE

from grpo_run import CompletionTrace, ConfigIssue, LogsCompletions, RunConfig, Tracker
from grpo_run.cli.main import main
from grpo_run.core.loop.observers import StepEvent, TrackerFanout
from grpo_run.plugins.trackers.common import TABLE_COLUMNS
from grpo_run.plugins.trackers.mlflow import MlflowConfig, MlflowTracker, metric_key
from grpo_run.plugins.trackers.tensorboard import TensorBoardConfig, TensorBoardTracker
from grpo_run.plugins.trackers.wandb import WandbConfig, WandbTracker

STEPS = {0: {"eval/accuracy": 0.125, "eval/pass@2": 0.5},
         1: {"reward/mean": 0.25, "loss/total": -1.5, "policy/entropy": float("nan")},
         2: {"reward/mean": 0.625, "loss/total": 0.75, "perf/step_s": float("inf")}}


def _traces(step: int) -> list[CompletionTrace]:
    return [CompletionTrace(kind="train", step=step, row_id=f"r{i}", group=i, sample=0, prompt=f"{i}+1=",
                            completion=f"{i + 1} | done" if i else "line one\nline two", ground_truth=i + 1,
                            reward=float(i % 2), max_reward=1.0, solved=bool(i % 2), scores={"math": float(i % 2)},
                            finish_reason="stop", num_tokens=3, policy_version=step - 1, advantage=0.5 - i % 2)
            for i in range(3)]


def _drive(tracker) -> None:
    assert isinstance(tracker, Tracker) and isinstance(tracker, LogsCompletions)
    for step, metrics in STEPS.items():
        tracker.log(step, metrics)
    tracker.log_completions(2, "train", _traces(2))
    tracker.close()


def test_tensorboard_scalars_and_completions_table(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    _drive(TensorBoardTracker(TensorBoardConfig(), str(tmp_path)))
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert sorted(events.Tags()["scalars"]) == ["eval/accuracy", "eval/pass@2", "loss/total", "reward/mean"]
    assert [(e.step, e.value) for e in events.Scalars("reward/mean")] == [(1, 0.25), (2, 0.625)]  # float32-exact
    assert [(e.step, e.value) for e in events.Scalars("loss/total")] == [(1, -1.5), (2, 0.75)]
    [text] = events.Tensors("completions/train/text_summary")
    table = tensor_util.make_ndarray(text.tensor_proto).item().decode()
    lines = table.splitlines()
    assert text.step == 2 and len(lines) == 2 + 3
    assert lines[0] == "| " + " | ".join(TABLE_COLUMNS) + " |"
    assert "| line one<br>line two |" in lines[2] and "| 2 \\| done |" in lines[3]  # one row per completion


def _wandb_records(run_dir: Path) -> list[dict]:
    [offline] = (run_dir / "wandb").glob("offline-run-*")
    wandb_cli = Path(sys.executable).with_name("wandb")
    proc = subprocess.run([str(wandb_cli), "leet", "inspect", "--json", str(offline)],
                          capture_output=True, text=True, timeout=120, check=True)
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def test_wandb_offline_run_holds_history_config_and_table(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text('[run]\nname = "t"\nseed = 3\n')
    tracker = WandbTracker(WandbConfig(project="p"), str(tmp_path))
    _drive(tracker)
    records = _wandb_records(tmp_path)
    history = {r["history"]["step"]["num"]: r["history"]["item"] for r in records if r["type"] == "history"}
    assert sorted(history) == [0, 1, 2]
    assert history[0]["eval/accuracy"] == 0.125 and history[0]["eval/pass@2"] == 0.5
    assert history[1]["reward/mean"] == 0.25 and "policy/entropy" not in history[1]
    assert history[2]["reward/mean"] == 0.625 and "perf/step_s" not in history[2]
    table_ref = history[2]["completions/train._type"], history[2]["completions/train.path"]
    assert table_ref[0] == "table-file"
    [run] = [r["run"] for r in records if r["type"] == "run"]
    assert run["project"] == "p" and run["display_name"] == tmp_path.name
    assert run["config"]["update"]["run"] == {"name": "t", "seed": 3}
    table = json.loads((tracker.run_path / "files" / table_ref[1]).read_text())
    assert table["columns"] == list(TABLE_COLUMNS) and len(table["data"]) == 3
    assert table["data"][0][TABLE_COLUMNS.index("completion")] == "line one\nline two"
    assert table["data"][1][TABLE_COLUMNS.index("ground_truth")] == "2"  # one type per column


def test_mlflow_file_store_holds_metrics_config_and_table(tmp_path: Path, monkeypatch) -> None:
    from mlflow.tracking import MlflowClient

    (tmp_path / "config.toml").write_text('[run]\nname = "t"\n')
    tracker = MlflowTracker(MlflowConfig(experiment="exp"), str(tmp_path))
    _drive(tracker)
    uri = (tmp_path / "mlruns").as_uri()
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    run = client.get_run(tracker.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == tmp_path.name
    assert [(m.step, m.value) for m in client.get_metric_history(tracker.run_id, "reward/mean")] == [(1, 0.25), (2, 0.625)]
    assert [(m.step, m.value) for m in client.get_metric_history(tracker.run_id, "eval/pass_at_2")] == [(0, 0.5)]
    assert set(run.data.metrics) == {"eval/accuracy", "eval/pass_at_2", "reward/mean", "loss/total"}
    assert client.get_experiment(tracker.experiment_id).name == "exp"
    assert sorted(a.path for a in client.list_artifacts(tracker.run_id)) == ["completions", "config.toml"]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)  # load_table searches runs through the fluent API
    table = client.load_table(tracker.experiment_id, "completions/train_2.json", run_ids=[tracker.run_id])
    assert list(table["completion"]) == ["line one\nline two", "2 | done", "3 | done"]
    assert list(table["reward"]) == [0.0, 1.0, 0.0]


def test_mlflow_metric_names_keep_only_allowed_characters() -> None:
    assert metric_key("eval/pass@16") == "eval/pass_at_16"
    assert metric_key("verifier/code-v2/latency_p50_ms") == "verifier/code-v2/latency_p50_ms"
    assert metric_key("a:b(c)") == "a_b_c_"


@pytest.mark.parametrize("name,module,config", [
    ("tensorboard", "tensorboard", TensorBoardConfig()), ("wandb", "wandb", WandbConfig()),
    ("mlflow", "mlflow", MlflowConfig()),
])
def test_a_missing_extra_is_a_config_error_naming_it(monkeypatch, name: str, module: str, config) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda m, *a: None if m == module else real(m, *a))
    assert config.check_run(RunConfig()) == [
        ConfigIssue(f"trackers.{name}", f"needs the {module} package: pip install 'grpo-run[{name}]'")]
    monkeypatch.undo()
    assert config.check_run(RunConfig()) == []


class _Broken:
    name = "broken"

    def __init__(self) -> None:
        self.calls = 0

    def log(self, step, metrics) -> None:
        self.calls += 1
        raise ConnectionError("server down")

    def close(self) -> None:
        pass


class _Good(_Broken):
    name = "good"

    def log(self, step, metrics) -> None:
        self.calls += 1


def test_a_failing_tracker_warns_once_and_never_stops_the_others() -> None:
    broken, good, warnings = _Broken(), _Good(), []
    fanout = TrackerFanout([broken, good], warn=warnings.append)
    for step in (1, 2, 3):
        fanout.on_step(StepEvent(step, {"reward/mean": 1.0}))
    assert (broken.calls, good.calls, fanout.failures) == (3, 3, {"broken": 3})
    assert warnings == ["tracker 'broken' failed (ConnectionError: server down); training goes on, "
                        "later failures are only logged"]


def test_a_run_with_every_tracker_logs_what_metrics_jsonl_holds(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = write_run(tmp_path, verifier=DIGIT_SHARE, logging={"log_rollouts_every": 2},
                    trackers={"tensorboard": {}, "wandb": {"project": "e2e"}, "mlflow": {}})
    out = tmp_path / "out"
    assert main([str(cfg), "--output-dir", str(out)]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    expected = [(r["step"], r["reward/mean"]) for r in rows]
    assert [s for s, _ in expected] == [1, 2] and all(0 < r < 1 for _, r in expected)
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    scalars = events.Scalars("reward/mean")
    assert [e.step for e in scalars] == [1, 2]
    assert [e.value for e in scalars] == pytest.approx([r for _, r in expected], rel=1e-7)  # stored as float32
    assert [e.step for e in events.Tensors("completions/train/text_summary")] == [2]
    history = {r["history"]["step"]["num"]: r["history"]["item"] for r in _wandb_records(out) if r["type"] == "history"}
    assert [(s, history[s]["reward/mean"]) for s in sorted(history)] == expected
    assert history[2]["completions/train.nrows"] == 3 * 4  # the traced batch: 3 prompts x 4 samples
    uri = (out / "mlruns").as_uri()
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    [run] = client.search_runs([client.get_experiment_by_name("grpo-run").experiment_id])
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "reward/mean")] == expected
