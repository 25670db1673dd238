"""``grpo-run new-plugin``: one package per family is generated, installed (no build isolation, no
dependencies) into a directory of its own that this module puts on ``sys.path`` and
``PYTHONPATH`` -- never into the venv, so nothing beside the tests (a ``grpo-run`` the user runs)
sees packages come and go -- its own tests run, and one run trains with the generated components
at once (the transform loads its own example's data)."""

from __future__ import annotations

import csv
import importlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_run.cli.main import main
from grpo_run.cli.new_plugin import KINDS, names_for
from grpo_run.core.config.toml_writer import dumps_toml
from grpo_run.core.plugins.host import build_plugin_host
from grpo_run.plugins.models.sources import CHECKPOINTS_DIR

NAMES = {kind: f"scaffold-{kind}" for kind in KINDS}


def pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--quiet", "--disable-pip-version-check", *args], check=True)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The generated packages (one per family), installed into a directory of their own that is
    on ``sys.path`` (and the ``PYTHONPATH`` of subprocesses) for this module only."""
    root = tmp_path_factory.mktemp("scaffold")
    target = tmp_path_factory.mktemp("site-packages")
    dirs = []
    for kind, name in NAMES.items():
        assert main(["new-plugin", kind, name, str(root / name)]) == 0
        dirs.append(root / name)
    pip("install", "--no-deps", "--no-build-isolation", "--target", str(target), *map(str, dirs))
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(target))
        patch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(target), os.environ.get("PYTHONPATH")])))
        yield dirs
    importlib.invalidate_caches()


@pytest.mark.slow
def test_generated_plugins_register_and_train_together(installed, tmp_path, monkeypatch) -> None:
    registry = build_plugin_host().registry
    for kind, name in NAMES.items():
        assert registry.has(kind, name), (kind, name)
        assert next(e for e in registry if e.name == name).distribution == f"grpo-run-{name}"
    model_env = names_for("model", NAMES["model"])["env_var"]
    monkeypatch.setenv(model_env, str(CHECKPOINTS_DIR / "tiny-arithmetic"))
    config = {
        "model": {"name_or_path": NAMES["model"]},
        "task": {"name": NAMES["task"], "verifier": NAMES["verifier"], "num_eval": 20},
        "data": {"max_prompt_token_length": 16},
        "rollout": {"num_unique_prompts_rollout": 4, "num_samples_per_prompt_rollout": 4, "response_length": 6},
        "loss": {"name": NAMES["loss"], "clip": 0.2},
        "kl": {"name": NAMES["kl"], "beta": 0.01},
        "sampler": {"name": NAMES["sampler"]},
        "engine": {"name": NAMES["engine"], "max_batch_size": 8},
        "train": {"total_steps": 3, "local_eval_every": 3},
        "scoring": {"num_workers": 1},
        "logging": {"progress": False},
        "verifiers": {NAMES["verifier"]: {"weight": 1.0}},
        "trackers": {NAMES["tracker"]: {"prefixes": ["eval/", "reward/"]}},
    }
    path = tmp_path / "run.toml"
    path.write_text(dumps_toml(config))
    run = tmp_path / "run"
    assert main([str(path), "--output-dir", str(run)]) == 0
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [0, 1, 2, 3]
    rows = list(csv.DictReader((run / f"{NAMES['tracker']}.csv").open()))
    assert {r["step"] for r in rows if r["metric"] == "eval/accuracy"} == {"0", "3"}
    assert {r["metric"].split("/")[0] for r in rows} == {"eval", "reward"}
    # The task's rows named the generated verifier, which scored them (the shipped model answers
    # sums, so some completions are right).
    assert any(r["metric"] == "reward/mean" and float(r["value"]) > 0 for r in rows)
    # The transform works on data sources, not tasks: its own example run loads and checks.
    from grpo_run.core.data.sources import load_rows
    from grpo_run.core.config import load_config

    example = installed[list(NAMES).index("transform")] / "example.toml"
    monkeypatch.chdir(example.parent)
    loaded = load_rows(load_config(example, registry), registry)
    assert len(loaded.train) == 144 and loaded.train[0]["ground_truth"] == "0"
    assert loaded.train[-1]["solution"] == "11 plus 11 makes 22" and loaded.train[-1]["ground_truth"] == "22"


@pytest.mark.slow
def test_generated_tests_pass(installed) -> None:
    if importlib.util.find_spec("grpo_run.testing") is None:
        pytest.skip("grpo_run.testing (the plugin test kit the generated tests call) is not in this tree yet")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--import-mode=importlib",
         *(str(d / "tests") for d in installed)],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert f"{2 * len(KINDS)} passed" in result.stdout, result.stdout[-2000:]


@pytest.mark.slow
def test_generated_episode_plugins_check_and_the_environment_runs_episodes(installed, tmp_path, monkeypatch,
                                                                           capsys) -> None:
    """The environment, renderer and tool examples pass `grpo-run check` with the component in its
    table; two steps of the environment's example play multi-turn episodes of the shipped model."""
    tables = {"environment": "[environment]\nname = ", "renderer": "[renderer]\nname = ", "tool": "[tools."}
    for kind, table in tables.items():
        example = installed[list(NAMES).index(kind)] / "example.toml"
        assert table + ('"' if kind != "tool" else "") + NAMES[kind] in example.read_text(), kind
        monkeypatch.chdir(example.parent)
        assert main(["check", "example.toml"]) == 0, capsys.readouterr().err
        assert "example.toml: ok" in capsys.readouterr().out
    example = installed[list(NAMES).index("environment")] / "example.toml"
    run = tmp_path / "run"
    overrides = ["rollout.num_unique_prompts_rollout=4", "rollout.num_samples_per_prompt_rollout=4",
                 "train.total_steps=2", "train.local_eval_every=0", "logging.progress=false"]
    assert main([str(example), "--output-dir", str(run), *(a for o in overrides for a in ("--set", o))]) == 0
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2]
    for step in steps:
        assert step["env/episodes"] == 16 and step["env/error_rate"] == 0 and step["env/segments_mean"] == 1
        # tiny-arithmetic's first answer is usually off by one: the environment answers and it tries again.
        assert 1 < step["env/turns_mean"] <= 3 and step["env/wrong_answers"] > 0 and 0 <= step["env/solved"] <= 1


def test_generated_package_layout(tmp_path) -> None:
    dest = tmp_path / "pkg"
    assert main(["new-plugin", "loss", "my-loss", str(dest)]) == 0
    files = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    assert files == ["README.md", "example.toml", "pyproject.toml", "src/grpo_run_my_loss/__init__.py",
                     "src/grpo_run_my_loss/loss.py", "tests/test_grpo_run_my_loss.py"]
    pyproject = (dest / "pyproject.toml").read_text()
    assert '[project.entry-points.grpo_run]\ngrpo_run_my_loss = "grpo_run_my_loss"' in pyproject
    assert 'name = "grpo-run-my-loss"' in pyproject
    assert "register(MyLoss)" in (dest / "src/grpo_run_my_loss/__init__.py").read_text()
    assert "testing.check_loss(MyLoss, MyLoss.Config())" in (dest / "tests/test_grpo_run_my_loss.py").read_text()
    # The example config is valid for the installed grpo-run once the plugin is there: its
    # [loss] names the new loss.
    assert '[loss]\nname = "my-loss"' in (dest / "example.toml").read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["new-plugin", "scorer", "x"], "new-plugin: unknown kind 'scorer'; kinds: verifier, loss, kl, sampler, engine, task, model, tracker, "
                                          "transform, environment, renderer, tool"),
        (["new-plugin", "loss", "My Loss"], "new-plugin: the name 'My Loss' must be lower-case letters"),
    ],
)
def test_bad_arguments_are_user_errors(args, message, capsys) -> None:
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_a_non_empty_directory_is_refused(tmp_path, capsys) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    assert main(["new-plugin", "loss", "my-loss", str(tmp_path)]) == 2
    assert f"new-plugin: {tmp_path} exists and is not empty" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]
