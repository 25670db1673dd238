"""The observability keys: ``[eval]``, ``logging.log_rollouts_every`` / ``max_rollout_bytes`` /
``dashboard_port`` and tracker tables, validated before any model loads and saved with the run."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.paths import EXAMPLES

from grpo_run.cli.main import main
from grpo_run.core.config import dump_config_toml, load_config

EXAMPLE = EXAMPLES / "arithmetic.toml"


@pytest.mark.parametrize("override,message", [
    ("eval.num_samples=-1", "eval.num_samples: must be >= 0 (got -1)"),
    ("eval.temperature=0", "eval.temperature: must be > 0.0 (got 0.0)"),
    ("logging.log_rollouts_every=-2", "logging.log_rollouts_every: must be >= 0 (got -2)"),
    ("logging.max_rollout_bytes=0", "logging.max_rollout_bytes: must be > 0 (got 0)"),
    ("logging.dashboard_port=70000", "logging.dashboard_port: must be <= 65535 (got 70000)"),
    ("trackers.tensorboard.logdir=x", "trackers.tensorboard.logdir: unknown key (did you mean 'log_dir'?)"),
    ("trackers.wandb.mode=cloud", "trackers.wandb.mode: must be one of 'offline', 'online' (got 'cloud')"),
])
def test_bad_values_are_rejected_with_their_key(override: str, message: str, capsys) -> None:
    assert main(["check", str(EXAMPLE), "--set", override]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_the_keys_reach_the_config_and_the_saved_copy(plugin_host, tmp_path: Path) -> None:
    cfg = load_config(EXAMPLE, plugin_host.registry, [
        "eval.num_samples=8", "eval.temperature=0.6", "logging.log_rollouts_every=5", "logging.dashboard_port=8765",
        "trackers.wandb.project=demo",
    ])
    assert (cfg.eval.num_samples, cfg.eval.temperature) == (8, 0.6)
    assert (cfg.logging.log_rollouts_every, cfg.logging.max_rollout_bytes, cfg.logging.dashboard_port) == (5, 8_000_000, 8765)
    assert cfg.trackers["wandb"].project == "demo" and cfg.trackers["wandb"].mode == "offline"
    saved = tmp_path / "saved.toml"
    saved.write_text(dump_config_toml(cfg))
    again = load_config(saved, plugin_host.registry, [])
    assert again.eval == cfg.eval and again.logging == cfg.logging and again.trackers == cfg.trackers
