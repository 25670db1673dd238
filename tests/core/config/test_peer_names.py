"""Unknown keys that are a peer framework's names (Open Instruct, ROLL, TRL, verl) or a grpo-run key
in the wrong table say where grpo-run keeps that setting, or plainly that it has none; a peer's
nested tables (ROLL's ``actor_train``) are looked into key by key."""

from __future__ import annotations

import re
import typing

import attrs
import pytest
from support.seed_configs import OPEN_INSTRUCT_KEYS, ROLL_KEYS

from grpo_run.core.config import load_config
from grpo_run.core.config.loading import parse_config
from grpo_run.core.config.peer_names import section_keys
from grpo_run.core.config.peer_tables import PEERS, lookup
from grpo_run.core.errors import ConfigError
from grpo_run.core.plugins.families import FAMILIES

BASE = '[task]\nname = "arithmetic"\n\n[verifiers.math]\n'
BASE_DATA = {"task": {"name": "arithmetic"}, "verifiers": {"math": {}}}
POINTER = re.compile(r"^unknown key \((grpo-run calls it |it is a key of |grpo-run has no equivalent: |an option of )")


def issues_for(tmp_path, text: str, plugin_host) -> list[str]:
    path = tmp_path / "run.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path, plugin_host.registry)
    return [f"{i.path}: {i.message}" for i in info.value.issues]


def issues_of(data: dict, plugin_host) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        parse_config({**BASE_DATA, **data}, plugin_host.registry)
    return {i.path: i.message for i in info.value.issues}


def nested(path: str, value: object) -> dict:
    out: dict = {}
    node = out
    *heads, last = path.split(".")
    for head in heads:
        node = node.setdefault(head, {})
    node[last] = value
    return out


def test_peer_names_at_the_top_level_name_grpo_run_keys(tmp_path, plugin_host) -> None:
    text = "learning_rate = 1e-6\nnum_generations = 8\nper_device_train_batch_size = 4\nbeta = 0.04\n" + BASE
    issues = issues_for(tmp_path, text, plugin_host)
    assert issues[0] == "learning_rate: unknown key (grpo-run calls it optim.lr)"
    assert issues[1] == "num_generations: unknown key (grpo-run calls it rollout.num_samples_per_prompt_rollout)"
    # A micro-batch in Open Instruct and ROLL, completions per device in TRL: not the prompts of a step.
    assert issues[2].startswith("per_device_train_batch_size: unknown key (grpo-run has no equivalent: a per-device "
                                "micro-batch")
    assert "learner.max_tokens_per_forward" in issues[2]
    assert issues[3] == "beta: unknown key (grpo-run calls it kl.beta)"


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


def test_roll_worker_tables_are_looked_into_key_by_key(tmp_path, plugin_host) -> None:
    text = BASE + (
        "\n[actor_train.training_args]\nlearning_rate = 1e-6\nweight_decay = 0\n"
        "\n[actor_train.strategy_args]\nstrategy_name = \"megatron_train\"\n"
        "\n[actor_infer.generating_args]\ntemperature = 0.99\n"
        "\n[reference.model_args]\ndtype = \"bf16\"\n")
    issues = issues_for(tmp_path, text, plugin_host)
    assert issues[:3] == [
        "actor_train.training_args.learning_rate: unknown key (grpo-run calls it optim.lr)",
        "actor_train.training_args.weight_decay: unknown key (it is a key of [optim]: optim.weight_decay)",
        'actor_train.strategy_args.strategy_name: unknown key (grpo-run calls it learner.strategy: fsdp2_train -> '
        '"fsdp2", deepspeed_train -> "deepspeed"; megatron_train has no equivalent)',
    ]
    assert issues[3] == "actor_infer.generating_args.temperature: unknown key (grpo-run calls it rollout.temperature)"
    assert issues[4].startswith("reference.model_args: unknown key (grpo-run has no equivalent: the reference policy "
                                "is the starting model")
    assert len(issues) == 5
    # A table that is nobody's (a typo) stays one issue, with its spelling hint.
    assert issues_for(tmp_path, BASE + "\n[rolout]\nn = 1\n", plugin_host) == [
        "rolout: unknown key (did you mean 'rollout'?)"]


def test_an_option_of_another_component_says_which(tmp_path, plugin_host) -> None:
    text = BASE + '\n[engine]\ninflight_updates = true\n\n[loss]\nname = "grpo"\nclip_higher = 0.28\n'
    assert issues_for(tmp_path, text, plugin_host) == [
        'loss.clip_higher: unknown key (an option of loss "cispo", "dapo" and "gspo"; this loss is "grpo")',
        'engine.inflight_updates: unknown key (an option of engine "vllm"; this engine is "hf")',
    ]


# The pointers the issue found missing or wrong (main 62eca42), and more of ours, never fitted to
# by the seed walk below: (where the key is written, the hint expected).
HELD_OUT = [
    ("clip_lower", "grpo-run calls it loss.clip_lower"),
    ("clip_higher", "grpo-run calls it loss.clip_higher"),
    ("active_sampling", "grpo-run calls it sampler.name"),
    ("no_resampling_pass_rate", "grpo-run calls it sampler.no_resampling_pass_rate"),
    ("masked_mean_axis", "grpo-run calls it algorithm.loss_aggregation"),
    ("non_stop_penalty", "grpo-run calls it verifiers.non_stop_penalty"),
    ("non_stop_penalty_value", "grpo-run calls it verifiers.non_stop_penalty.gate_fail_reward"),
    ("apply_r1_style_format_reward", "grpo-run calls it verifiers.format"),
    ("inflight_updates", "grpo-run calls it engine.inflight_updates"),
    ("wandb_project_name", "grpo-run calls it trackers.wandb.project"),
    ("vllm_gpu_memory_utilization", "grpo-run calls it engine.gpu_memory_utilization"),
    ("deepspeed_offload_optimizer", "grpo-run calls it learner.offload_optimizer"),
    ("keep_last_n_checkpoints", "grpo-run calls it checkpoint.keep_last_n"),
    ("kl_estimator", "grpo-run calls it kl.name"),
    ("rollout.prompt_length", "grpo-run calls it data.max_prompt_token_length"),
    ("advantage_clip", "grpo-run has no equivalent: advantages are not clipped"),
    ("whiten_advantages", "grpo-run has no equivalent: advantages are normalised per group"),
    ("loss.clip_range", "grpo-run calls it loss.clip_lower"),
    ("rollout_n", "grpo-run calls it rollout.num_samples_per_prompt_rollout"),
    ("rollout_batch_size", "grpo-run calls it rollout.num_unique_prompts_rollout"),
    ("num_return_sequences_in_group", "grpo-run calls it rollout.num_samples_per_prompt_rollout"),
    ("max_completion_length", "grpo-run calls it rollout.response_length"),
    ("epsilon_high", "grpo-run calls it loss.clip_higher"),
    ("scale_rewards", "grpo-run calls it algorithm.advantage_normalization_type"),
    ("loss_type", "grpo-run calls it loss.name"),
    ("use_vllm", "grpo-run calls it engine.name"),
    ("num_iterations", "grpo-run calls it algorithm.num_epochs"),
    ("actor_rollout_ref.rollout.n", "grpo-run calls it rollout.num_samples_per_prompt_rollout"),
    ("actor_rollout_ref.actor.optim.lr", "it is a key of [optim]: optim.lr"),
    ("actor_rollout_ref.actor.ppo_mini_batch_size", "grpo-run calls it algorithm.num_mini_batches"),
    ("actor_rollout_ref.actor.kl_loss_coef", "grpo-run calls it kl.beta"),
    ("data.train_batch_size", "grpo-run calls it rollout.num_unique_prompts_rollout"),
    ("data.max_response_length", "grpo-run calls it rollout.response_length"),
    ("trainer.total_training_steps", "grpo-run calls it train.total_steps"),
    ("algorithm.norm_adv_by_std_in_grpo", "grpo-run calls it algorithm.advantage_normalization_type"),
]


@pytest.mark.parametrize(("where", "hint"), HELD_OUT, ids=[w for w, _ in HELD_OUT])
def test_held_out_peer_keys_point_right(where, hint, plugin_host) -> None:
    issues = issues_of(nested(where, 1), plugin_host)
    assert issues[where].startswith(f"unknown key ({hint}"), issues


def test_every_key_the_open_instruct_seeds_name_gets_a_pointer_or_a_plain_no(plugin_host) -> None:
    issues = issues_of({name: 1 for name in OPEN_INSTRUCT_KEYS}, plugin_host)
    for name in OPEN_INSTRUCT_KEYS:
        assert POINTER.match(issues.get(name, "")), (name, issues.get(name))


def test_every_key_path_of_the_roll_guide_gets_a_pointer_or_a_plain_no(plugin_host) -> None:
    data: dict = {}
    for path in ROLL_KEYS:
        value = {"dtype": "bf16"} if path.endswith(("model_args", "strategy_args")) else 1
        for head, sub in nested(path, value).items():
            data[head] = _merge(data.get(head), sub)
    issues = issues_of(data, plugin_host)
    for path in ROLL_KEYS:
        assert POINTER.match(issues.get(path, "")), (path, issues.get(path))


def _merge(a, b):
    if not isinstance(a, dict) or not isinstance(b, dict):
        return b
    return {**a, **{k: _merge(a.get(k), v) for k, v in b.items()}}


def test_every_pointer_names_a_key_grpo_run_has(plugin_host) -> None:
    """A pointer to a renamed or removed key would send users nowhere."""
    known = _grpo_run_keys(plugin_host.registry)
    bad = []
    for name, peer in PEERS.items():
        bad += [(name, target) for target in filter(None, (peer.to, *peer.also)) if target not in known]
        for word in re.findall(r"\b[a-z_]+(?:\.(?:<name>|[a-z_]+))+", peer.hint):
            if word.split(".")[0] not in {"docs", "trainer_state", "metrics", "log", "grpo_run", "config", "torch", "e"} \
                    and not word.endswith(".md") and word not in known:  # (files and Python names aside)
                bad.append((name, word))
    assert bad == []


def test_lookup_prefers_the_longest_tail() -> None:
    assert lookup(["validation", "generating_args", "temperature"]).to == "eval.temperature"
    assert lookup(["actor_infer", "generating_args", "temperature"]).to == "rollout.temperature"
    assert lookup(["x", "learning_rate"]).to == "optim.lr"
    assert lookup(["temprature"]) is None


def _grpo_run_keys(registry) -> set[str]:
    """Every key path of a config: the sections', the plugin slots' and their components' options."""
    known = {path for paths in section_keys().values() for path in paths}
    known |= {"verifiers.<name>", "verifiers.<name>.weight", "trackers.<name>", "tools.<name>"}
    for fam in FAMILIES:
        if fam.slot is None:
            continue
        known.add(fam.slot)
        if not fam.many:
            known.add(f"{fam.slot}.name")
        for name in registry.names(fam):
            config = registry.get(fam, name).Config
            prefix = f"{fam.slot}.{name}" if fam.many else fam.slot
            known.add(prefix)
            if attrs.has(config):
                for field in attrs.fields(config):
                    known.add(f"{prefix}.{field.name}")
                    if attrs.has(typing.get_type_hints(config).get(field.name)):
                        known |= {f"{prefix}.{field.name}.{f.name}" for f in attrs.fields(field.type)}
    return known
