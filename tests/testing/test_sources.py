"""The task, model-source and tracker checks catch broken components."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from grpo_run import (
    NoConfig,
)
from grpo_run.testing import (
    check_model_source,
    check_task,
    check_tracker,
    check_transform,
)

HAVE_BWRAP = shutil.which("bwrap") is not None
FAST = 0.5
"""Scorer time limit for this module's own (instant) verifiers."""



# =============================================================================================
# Tasks, model sources and trackers that break the contract
# =============================================================================================


class GoodTask:
    name = "good-task"
    Config = NoConfig

    def __init__(self, config: NoConfig) -> None:
        self.config = config

    def train_rows(self):
        return [{"id": f"t{i}", "prompt": f"{i}+1=", "ground_truth": str(i + 1), "verifier": "math"} for i in range(5)]

    def eval_rows(self):
        return [{"id": "e0", "messages": [{"role": "user", "content": "2+2"}], "ground_truth": "4", "verifier": "math"}]


class NoGoldTask(GoodTask):
    name = "no-gold"

    def train_rows(self):
        return [{k: v for k, v in row.items() if k != "ground_truth"} for row in super().train_rows()]


class RandomTask(GoodTask):
    """A new random order on every construction: a resumed run would see other data."""

    name = "random-task"

    def __init__(self, config: NoConfig) -> None:
        super().__init__(config)
        self.order = random.sample(range(5), 5)

    def train_rows(self):
        rows = super().train_rows()
        return [rows[i] for i in self.order] + [{**rows[0], "id": f"extra-{random.random()}"}]


class SameIdTask(GoodTask):
    name = "same-id"

    def eval_rows(self):
        return super().eval_rows() * 2


def test_tasks() -> None:
    check_task(GoodTask, enabled_verifiers=["math"])
    with pytest.raises(AssertionError, match=r"^task 'no-gold': rows: train row 0 .*: train row 0: no "
                                             r"'ground_truth' \(set the source's ground_truth_key"):
        check_task(NoGoldTask)
    with pytest.raises(AssertionError, match=r"^task 'good-task': rows: train row 0 .*: row asks for verifier 'math', "
                                             r"which is not enabled"):
        check_task(GoodTask, enabled_verifiers=["code"])
    with pytest.raises(AssertionError, match=r"^task 'random-task': reproducible: a second instance with the same "
                                             r"config returned different train rows$"):
        check_task(RandomTask)
    with pytest.raises(AssertionError, match=r"^task 'same-id': ids: eval row 1: id 'e0' is used twice$"):
        check_task(SameIdTask)


class ConfigOnlySource:
    """A directory with a model config but no tokenizer files."""

    name = "config-only"
    Config = NoConfig
    directory = ""
    """Set by the test."""

    def __init__(self, config: NoConfig) -> None:
        self.config = config

    def resolve(self) -> str:
        return self.directory


class MissingDirSource(ConfigOnlySource):
    name = "missing-dir"

    def resolve(self) -> str:
        return "/nonexistent/grpo-run-model"


def test_model_sources(grpo_run_tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    shutil.copy(grpo_run_tiny_model_dir / "config.json", model_dir / "config.json")
    monkeypatch.setattr(ConfigOnlySource, "directory", str(model_dir))
    with pytest.raises(AssertionError, match=r"^model 'config-only': tokenizer: transformers cannot load a tokenizer "
                                             r"from .*model: "):
        check_model_source(ConfigOnlySource)
    with pytest.raises(AssertionError, match=r"^model 'missing-dir': resolve: resolve\(\) returned "
                                             r"'/nonexistent/grpo-run-model', expected the path of a local directory$"):
        check_model_source(MissingDirSource)


class JsonlTracker:
    """Appends each step's metrics to ``<run_dir>/tracker.jsonl``."""

    name = "jsonl-test"
    Config = NoConfig

    def __init__(self, config: NoConfig, run_dir: str) -> None:
        self.file = open(Path(run_dir) / "tracker.jsonl", "a")  # noqa: SIM115 (closed by close())

    def log(self, step: int, metrics) -> None:
        self.file.write(json.dumps({"step": step, **metrics}) + "\n")

    def close(self) -> None:
        self.file.close()


class StampingTracker(JsonlTracker):
    """Writes the step into the loop's metrics mapping."""

    name = "stamping"

    def log(self, step: int, metrics) -> None:
        metrics["_step"] = step
        super().log(step, metrics)


class FailingCloseTracker(JsonlTracker):
    name = "failing-close"

    def close(self) -> None:
        super().close()
        raise ConnectionError("dashboard unreachable")


def test_trackers(tmp_path: Path) -> None:
    check_tracker(JsonlTracker, run_dir=tmp_path)
    lines = [json.loads(line) for line in (tmp_path / "tracker.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [0, 1, 2]
    check_tracker(JsonlTracker)  # in a temporary run directory of its own
    with pytest.raises(AssertionError, match=r"^tracker 'stamping': log: log\(0, \{'eval/accuracy': 0\.25\}\) raised "
                                             r"TypeError: 'mappingproxy' object does not support item assignment$"):
        check_tracker(StampingTracker, run_dir=tmp_path)
    with pytest.raises(AssertionError, match=r"^tracker 'failing-close': close: close\(\) raised ConnectionError: "
                                             r"dashboard unreachable$"):
        check_tracker(FailingCloseTracker, run_dir=tmp_path)


class GoodTransform:
    name = "upper"
    Config = NoConfig

    def __init__(self, config: NoConfig) -> None:
        self.config = config

    def __call__(self, row: dict[str, Any]) -> dict[str, Any] | None:
        if row["ground_truth"] == "skip":
            return None
        row["ground_truth"] = str(row["ground_truth"]).upper()
        return row


class CountingTransform(GoodTransform):
    calls = 0

    def __call__(self, row: dict[str, Any]) -> dict[str, Any] | None:
        CountingTransform.calls += 1
        row["ground_truth"] = f"{row['ground_truth']}-{CountingTransform.calls}"
        return row


class PromptDroppingTransform(GoodTransform):
    def __call__(self, row: dict[str, Any]) -> dict[str, Any] | None:
        return {"ground_truth": row["ground_truth"], "verifier": row["verifier"]}


ROW = {"prompt": "q", "ground_truth": "a", "verifier": "math"}


def test_transforms() -> None:
    check_transform(GoodTransform, cases=[(ROW, {"ground_truth": "A"}), ({**ROW, "ground_truth": "skip"}, None)])
    with pytest.raises(AssertionError, match=r"^transform 'upper': expected: case 0: got \{'ground_truth': 'A'\}, "
                                             r"expected \{'ground_truth': 'B'\}$"):
        check_transform(GoodTransform, cases=[(ROW, {"ground_truth": "B"})])
    with pytest.raises(AssertionError, match=r"^transform 'upper': expected: case 0: expected the row to be dropped"):
        check_transform(GoodTransform, cases=[(ROW, None)])
    with pytest.raises(AssertionError, match=r"^transform 'upper': deterministic: case 0: "):
        check_transform(CountingTransform, cases=[(ROW, None)])
    with pytest.raises(AssertionError, match=r"^transform 'upper': rows: case 0: the transformed row is invalid: "
                                             r"train row 0: a row needs 'messages' or 'prompt'$"):
        check_transform(PromptDroppingTransform, cases=[(ROW, {"ground_truth": "a"})])
    with pytest.raises(AssertionError, match=r"^transform 'upper': cases: give at least one"):
        check_transform(GoodTransform)
