"""A loss from someone else's package trains like a built-in one: the example of
docs/write-your-own-loss.md (tests/loss_dist, installed by conftest) used through its entry
point and by import path, plus import-path names for a module that is no plugin at all.

A randomly initialised model never answers arithmetic, so the runs here are scored by
``support.verifiers.DigitShare`` (also named by import path: any family resolves ``module:Class``), whose
reward varies between samples from the first step on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

from support.runs import write_run as write_small_run
from support.verifiers import DIGIT_SHARE

from grpo_run.cli.main import main
from grpo_run.core.config import ConfigError, parse_config

IMPORT_PATH = "grpo_run_example_loss.losses:ReinforceBaselineLoss"
VERIFIER = DIGIT_SHARE


def write_run(tmp_path: Path, model_dir: Path, loss: dict, steps: int = 2) -> Path:
    return write_small_run(
        tmp_path, verifier=VERIFIER, model={"name_or_path": str(model_dir)}, loss=loss,
        rollout={"response_length": 6}, train={"total_steps": steps},
    )


@pytest.mark.parametrize("name", ["reinforce-baseline", IMPORT_PATH])
def test_training_run_with_the_example_loss(tmp_path: Path, tiny_model_dir: Path, name: str) -> None:
    cfg = write_run(tmp_path, tiny_model_dir, {"name": name, "max_ratio": 5.0})
    out = tmp_path / "out"
    assert main([str(cfg), "--output-dir", str(out)]) == 0
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2]
    for line in lines:  # the plugin's own metrics, under loss/
        assert line["loss/ratio_mean"] == 1.0 and line["loss/clip_frac"] == 0.0
        assert line["optim/grad_norm"] > 0
    effective = (out / "config.toml").read_text()
    assert f'name = "{name}"' in effective and "max_ratio = 5.0" in effective
    before = load_file(tiny_model_dir / "model.safetensors")
    after = load_file(out / "checkpoints" / "step_2" / "model.safetensors")
    assert any((before[k] - after[k]).abs().max() > 0 for k in before)


def test_plugins_command_lists_the_example_loss(capsys) -> None:
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "reinforce-baseline" in out and "grpo-run-example-loss" in out


def test_example_loss_config_is_validated_by_its_own_rules(plugin_host) -> None:
    data = {"data": {"train": [{"path": "a.jsonl"}]}, "train": {"local_eval_every": 0},
            "verifiers": {"exact-match": {}}, "loss": {"name": IMPORT_PATH, "max_ratio": 0.5}}
    with pytest.raises(ConfigError) as err:
        parse_config(data, plugin_host.registry, "run.toml")
    assert [(i.path, i.message) for i in err.value.issues] == [("loss.max_ratio", "must be > 1.0 (got 0.5)")]


def test_import_path_to_a_plain_module(tmp_path: Path, monkeypatch, plugin_host) -> None:
    # A loss in a project's own module: no distribution, no entry point.
    (tmp_path / "my_project_losses.py").write_text(
        "import attrs\n"
        "from grpo_run_example_loss.losses import ReinforceBaselineLoss\n"
        "class Sharper(ReinforceBaselineLoss):\n"
        "    name = 'sharper'\n"
        "    @attrs.frozen\n"
        "    class Config:\n"
        "        max_ratio: float = 2.0\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    data = {"data": {"train": [{"path": "a.jsonl"}]}, "train": {"local_eval_every": 0},
            "verifiers": {"exact-match": {}}, "loss": {"name": "my_project_losses:Sharper", "max_ratio": 3}}
    cfg = parse_config(data, plugin_host.registry)
    entry = plugin_host.registry.entry("loss", "my_project_losses:Sharper")
    assert cfg.loss.config.max_ratio == 3.0 and entry.cls.__name__ == "Sharper"
    assert entry.distribution == "<module my_project_losses>"
    loss = entry.cls(cfg.loss.config)
    assert loss.config.max_ratio == 3.0


LOCAL_LOSS = (
    "from grpo_run_example_loss.losses import ReinforceBaselineLoss\n"
    "class NextToTheConfig(ReinforceBaselineLoss):\n"
    "    name = 'next-to-the-config'\n"
)


def test_a_loss_module_next_to_the_config_or_in_the_working_directory_needs_no_pythonpath(
        tmp_path: Path, tiny_model_dir: Path) -> None:
    # The console script (not `python -m`, whose sys.path holds the working directory) run from
    # another directory, with PYTHONPATH unset: the module beside the config is found.
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (project / "beside_config_loss.py").write_text(LOCAL_LOSS)
    cfg = write_small_run(project, verifier=VERIFIER, model={"name_or_path": str(tiny_model_dir)},
                          loss={"name": "beside_config_loss:NextToTheConfig"}, train={"total_steps": 1})
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])  # the tests' support package, for the verifier
    script = str(Path(sys.executable).parent / "grpo-run")
    proc = subprocess.run([script, str(cfg), "--output-dir", str(tmp_path / "out")], cwd=elsewhere, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    first = json.loads((tmp_path / "out" / "metrics.jsonl").read_text().splitlines()[0])
    assert first["loss/ratio_mean"] == 1.0  # the local loss's own metric: it trained
    # The same module in the working directory, the config elsewhere.
    (elsewhere / "in_cwd_loss.py").write_text(LOCAL_LOSS)
    cfg.write_text(cfg.read_text().replace("beside_config_loss:", "in_cwd_loss:"))
    check = subprocess.run([script, "check", str(cfg)], cwd=elsewhere, env=env, capture_output=True, text=True,
                           timeout=120)
    assert check.returncode == 0, check.stderr
    missing = subprocess.run([script, "check", str(cfg)], cwd=project, env=env, capture_output=True, text=True,
                             timeout=120)
    assert missing.returncode == 2
    assert f"no module named 'in_cwd_loss' (is the package installed in this environment? not in {project}" \
        in missing.stderr
