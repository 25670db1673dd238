"""Unknown keys that are a peer framework's names (TRL, verl, Open Instruct) or a grpo-run key in
the wrong table say where grpo-run keeps that setting."""

from __future__ import annotations

import pytest

from grpo_run.core.config import load_config
from grpo_run.core.config.peer_names import PEER_NAMES, _section_keys
from grpo_run.core.errors import ConfigError

BASE = '[task]\nname = "arithmetic"\n\n[verifiers.math]\n'


def issues_for(tmp_path, text: str, plugin_host) -> list[str]:
    path = tmp_path / "run.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path, plugin_host.registry)
    return [f"{i.path}: {i.message}" for i in info.value.issues]


def test_peer_names_at_the_top_level_name_grpo_run_keys(tmp_path, plugin_host) -> None:
    text = "learning_rate = 1e-6\nnum_generations = 8\nper_device_train_batch_size = 4\nbeta = 0.04\n" + BASE
    assert issues_for(tmp_path, text, plugin_host) == [
        "learning_rate: unknown key (grpo-run calls it optim.lr)",
        "num_generations: unknown key (grpo-run calls it rollout.num_samples_per_prompt_rollout)",
        "per_device_train_batch_size: unknown key (grpo-run calls it rollout.num_unique_prompts_rollout: "
        "prompts per step, each sampled rollout.num_samples_per_prompt_rollout times)",
        "beta: unknown key (grpo-run calls it kl.beta)",
    ]


def test_peer_names_inside_a_table_and_keys_of_another_table(tmp_path, plugin_host) -> None:
    text = BASE + "\n[optim]\nlearning_rate = 1e-6\n\n[rollout]\nmax_grad_norm = 1.0\nalpha = 0.5\n"
    assert issues_for(tmp_path, text, plugin_host) == [
        "rollout.max_grad_norm: unknown key (it is a key of [optim]: optim.max_grad_norm)",
        "rollout.alpha: unknown key (it is a key of [model.lora] and [kl]: model.lora.alpha, kl.alpha)",
        "optim.learning_rate: unknown key (grpo-run calls it optim.lr)",
    ]


def test_a_close_spelling_still_wins(tmp_path, plugin_host) -> None:
    text = BASE + "\n[rollout]\ntemprature = 0.7\n"
    assert issues_for(tmp_path, text, plugin_host) == ["rollout.temprature: unknown key (did you mean 'temperature'?)"]


def test_every_peer_hint_names_existing_keys() -> None:
    """A hint pointing at a renamed or removed key would send users nowhere."""
    known = {path for paths in _section_keys().values() for path in paths}
    component_keys = {"loss.clip_lower", "loss.clip", "loss.clip_higher", "loss.name", "kl.name", "engine.name",
                      "verifiers.<name>.weight", "verifiers.<name>", "trackers.<name>"}
    for peer, hint in PEER_NAMES.items():
        words = [w.strip(",:;[]") for w in hint.split() if "." in w and not w.startswith('"')]
        assert words, peer
        for word in words:
            assert word in known or word in component_keys, (peer, word)
