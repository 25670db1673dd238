"""Component options whose default is a run setting (:class:`grpo_run.TakesRunDefaults`): filled in
before the rules are checked, shown in the saved config; a ``with_run`` that raises is a config
error naming the component."""

from __future__ import annotations

import pytest

from grpo_run.core.config import config_to_dict, parse_config
from grpo_run.core.errors import ConfigError

NAME = "support.rescaled_verifiers:FollowsRun"


def config(**table) -> dict:
    return {"model": {"dtype": "bfloat16"}, "data": {"train": [{"path": "rows.jsonl"}]}, "train": {"local_eval_every": 0},
            "verifiers": {NAME: table}}


def test_the_run_fills_in_the_default_before_the_rules_see_it(plugin_host) -> None:
    cfg = parse_config(config(), plugin_host.registry)
    assert cfg.verifiers[NAME].dtype == "bfloat16"  # check_run saw it filled in: no issue
    assert config_to_dict(cfg)["verifiers"][NAME]["dtype"] == "bfloat16"  # what config.toml records
    assert parse_config(config(dtype="float16"), plugin_host.registry).verifiers[NAME].dtype == "float16"


def test_a_with_run_that_raises_is_an_issue_naming_the_component(plugin_host) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(config(fail=True), plugin_host.registry, "run.toml")
    assert [(i.path, i.message) for i in err.value.issues] == [
        (f"verifiers.{NAME}", "filling in its defaults from the run raised RuntimeError: no defaults today")]
