"""``[learner]``, ``[distributed]`` and ``engine.num_engines``: defaults, and every rule with the
key it names."""

from __future__ import annotations

import importlib.util

import pytest

from support.paths import REPO

from grpo_run.core.config import ConfigError, dump_config_toml, load_config
from grpo_run.core.config.processes import ActorResources

EXAMPLE = "examples/arithmetic.toml"


@pytest.fixture
def load(plugin_host, monkeypatch):
    monkeypatch.chdir(REPO)

    def load(*overrides: str):
        return load_config(EXAMPLE, plugin_host.registry, overrides)

    return load


def issues(load, *overrides: str) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        load(*overrides)
    return {issue.path: issue.message for issue in info.value.issues}


def test_defaults_train_in_one_process_here(load) -> None:
    cfg = load()
    assert (cfg.learner.num_learners, cfg.learner.strategy, cfg.learner.stage) == (1, "single", 0)
    assert cfg.distributed.backend == "local" and cfg.engine.num_engines == 1
    assert cfg.distributed.resources_of("learner") == ActorResources(num_cpus=1.0, num_gpus=0.0)


def test_several_learners_default_to_ddp_and_deepspeed_to_zero_2(load) -> None:
    assert load("learner.num_learners=2").learner.strategy == "ddp"
    if importlib.util.find_spec("deepspeed") is None:  # the default test venv: a clear error instead
        with pytest.raises(ConfigError, match=r'learner.strategy: "deepspeed" needs the deepspeed package: '
                                              r'pip install "grpo-run\[deepspeed\]"'):
            load("learner.num_learners=2", "learner.strategy=deepspeed")
    else:
        cfg = load("learner.num_learners=2", "learner.strategy=deepspeed")
        assert cfg.learner.stage == 2 and cfg.learner.zero_stage is None
    # The effective strategy is written into the saved config.
    assert 'strategy = "ddp"' in dump_config_toml(load("learner.num_learners=3"))


@pytest.mark.parametrize(
    ("overrides", "key", "message"),
    [
        (["learner.strategy=single", "learner.num_learners=2"], "learner.strategy",
         '"single" trains in one process, but num_learners = 2'),
        (["learner.zero_stage=3"], "learner.zero_stage", 'is a DeepSpeed option; strategy is "single"'),
        (["learner.num_learners=2", "learner.strategy=fsdp2", "learner.offload_optimizer=true"],
         "learner.offload_optimizer", "fsdp2 offloads optimizer state with offload_params"),
        (["learner.num_learners=2", "learner.strategy=deepspeed", "learner.offload_params=true"],
         "learner.offload_params", '"deepspeed" with zero_stage = 3 (got "deepspeed", zero_stage = 2)'),
        (["learner.num_learners=2", "learner.strategy=deepspeed", "learner.zero_stage=3", "learner.offload_params=true"],
         "learner.offload_params", 'moves state from the GPU to the CPU, but model.device is "cpu"'),
        (["learner.dist_backend=nccl"], "learner.dist_backend", 'NCCL needs GPUs, but model.device is "cpu"'),
        (["learner.num_learners=2", "model.device=cuda:1"], "model.device", "each process uses its own GPU"),
        (["engine.num_engines=0"], "engine.num_engines", "must be > 0"),
        (["distributed.learner_resources.num_cpus=2"], "distributed.learner_resources",
         'only applies with distributed.backend = "ray"'),
        (["distributed.placement_strategy=PACK"], "distributed.placement_strategy", 'only applies with'),
        (["distributed.backend=ray", "distributed.placement_strategy=pack"], "distributed.placement_strategy",
         "must be one of"),
        (["distributed.backend=ray", "model.device=cuda"], "distributed.learner_resources.num_gpus",
         "a Ray actor sees only the GPUs it asks for"),
        (["distributed.backend=ray", "distributed.engine_resources.num_cpus=-1"], "distributed.engine_resources.num_cpus",
         ">= 0"),
        (["distributed.scoring_actors=2"], "distributed.scoring_actors", 'only applies with distributed.backend = "ray"'),
        (["distributed.scoring_resources.num_cpus=2"], "distributed.scoring_resources", "only applies with"),
        (["distributed.backend=ray", "distributed.scoring_actors=1", "scoring.num_workers=0"], "scoring.num_workers",
         "runs scoring.num_workers worker processes in each actor"),
    ],
)
def test_rules_name_the_key(load, overrides, key, message) -> None:
    found = issues(load, *overrides)
    assert key in found, found
    assert message in found[key]
