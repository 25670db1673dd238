"""What a run's config becomes for the learner: the token budgets per forward and gradient
checkpointing (``"auto"``: on for CUDA only), from the TOML a user writes."""

from __future__ import annotations

import tomllib

import pytest

from support.paths import EXAMPLES

from grpo_run.core.config import ConfigError, parse_config
from grpo_run.core.loop.build import learner_spec
from grpo_run.core.plugins.host import build_plugin_host


@pytest.fixture(scope="module")
def host():
    return build_plugin_host()


def _spec(host, extra: str = ""):
    data = tomllib.loads((EXAMPLES / "arithmetic.toml").read_text() + extra)
    cfg = parse_config(data, host.registry, "arithmetic.toml")
    return learner_spec(cfg, host, "tiny-arithmetic", pad_token_id=0)


def test_defaults_choose_the_budget_automatically_and_leave_checkpointing_off_on_the_cpu(host) -> None:
    spec = _spec(host)
    assert spec.model.device == "cpu"
    assert spec.model.gradient_checkpointing is False  # "auto" on a CPU
    assert (spec.forward_tokens, spec.logprob_forward_tokens) == ("auto", "auto")  # chosen where the learner runs


def test_budgets_and_checkpointing_as_written(host) -> None:
    spec = _spec(host, "\n[learner]\nmax_tokens_per_forward = 4096\nmax_tokens_per_logprob_forward = 0\n")
    assert (spec.forward_tokens, spec.logprob_forward_tokens) == (4096, 0)
    assert _spec(host, "\n[learner]\nmax_tokens_per_forward = 4096\n").logprob_forward_tokens == 8192  # twice
    data = tomllib.loads((EXAMPLES / "arithmetic.toml").read_text())
    data["model"]["gradient_checkpointing"] = True
    cfg = parse_config(data, host.registry, "arithmetic.toml")
    assert learner_spec(cfg, host, "tiny-arithmetic", pad_token_id=0).model.gradient_checkpointing is True


@pytest.mark.parametrize(("key", "value", "words"), [
    ("max_tokens_per_forward", -1, "learner.max_tokens_per_forward"),
    ("max_tokens_per_forward", "lots", "learner.max_tokens_per_forward"),
])
def test_a_bad_budget_names_its_key(host, key, value, words) -> None:
    data = tomllib.loads((EXAMPLES / "arithmetic.toml").read_text())
    data["learner"] = {key: value}
    with pytest.raises(ConfigError) as e:
        parse_config(data, host.registry, "arithmetic.toml")
    assert words in str(e.value)


def test_checkpointing_takes_auto_or_a_boolean(host) -> None:
    data = tomllib.loads((EXAMPLES / "arithmetic.toml").read_text())
    data["model"]["gradient_checkpointing"] = "sometimes"
    with pytest.raises(ConfigError) as e:
        parse_config(data, host.registry, "arithmetic.toml")
    assert "model.gradient_checkpointing" in str(e.value)
