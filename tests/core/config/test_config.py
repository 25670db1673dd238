"""The config loader: TOML -> RunConfig, strict structuring, all errors at once, overrides, dump."""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path
from typing import Any

import attrs
import pytest

from grpo_run import NoConfig, VerifierConfig
from grpo_run.core.config import (
    ConfigError,
    ConfigIssue,
    KLSlot,
    EngineSlot,
    PluginSlot,
    apply_overrides,
    config_to_dict,
    dump_config_toml,
    load_config,
    parse_config,
)
from grpo_run.core.config.advice import config_warnings
from grpo_run.core.errors import PluginError
from grpo_run.core.plugins.registry import ComponentRegistry

# ---------------------------------------------------------------------------------------------
# Dummy components
# ---------------------------------------------------------------------------------------------


def _higher_not_below_lower(inst: Any, _attribute: attrs.Attribute, value: float) -> None:
    if value < inst.clip_lower:
        raise ValueError(f"must be >= clip_lower ({inst.clip_lower}), got {value}")


class _Stubs:
    """The contract methods dummies need to register; config tests never call them."""

    def __call__(self, *args: Any) -> Any: ...
    def score(self, *args: Any) -> Any: ...
    def sample(self, n: int) -> Any: ...
    def state_dict(self) -> Any: ...
    def load_state_dict(self, state: Any) -> None: ...
    def train_rows(self) -> Any: ...
    def eval_rows(self) -> Any: ...
    async def generate(self, *args: Any) -> Any: ...
    async def update_weights(self, *args: Any) -> None: ...
    def close(self) -> None: ...


class DapoLoss(_Stubs):
    name = "dapo"

    @attrs.frozen
    class Config:
        clip_lower: float = attrs.field(default=0.2, validator=attrs.validators.ge(0))
        clip_higher: float = attrs.field(default=0.28, validator=[attrs.validators.ge(0), _higher_not_below_lower])


class CispoLoss(_Stubs):
    name = "cispo"

    @attrs.frozen
    class Config:
        clip_higher: float = 5.0
        mode: str = "token"

        def __attrs_post_init__(self) -> None:
            if self.mode == "seq" and self.clip_higher > 1:
                raise ValueError("mode 'seq' needs clip_higher <= 1")


class MathVerifier(_Stubs):
    name = "math"

    @attrs.frozen
    class Config(VerifierConfig):
        strict: bool = False


class CodeVerifier(_Stubs):
    name = "code"
    Config = VerifierConfig


class ArithmeticTask(_Stubs):
    name = "arithmetic"

    @attrs.frozen
    class Config:
        num_digits: int = attrs.field(default=2, validator=attrs.validators.gt(0))
        operators: tuple[str, ...] = ("+", "-")
        difficulty: str = attrs.field(default="easy", validator=attrs.validators.in_(["easy", "hard"]))


class K3(_Stubs):
    name = "k3"
    Config = NoConfig


class UniformSampler(_Stubs):
    name = "uniform"
    Config = NoConfig


class HFEngine(_Stubs):
    name = "hf"

    @attrs.frozen
    class Config:
        batch_size: int | None = None


@pytest.fixture(scope="module")
def registry() -> ComponentRegistry:
    reg = ComponentRegistry()
    for family, cls in [
        ("loss", DapoLoss),
        ("loss", CispoLoss),
        ("verifier", MathVerifier),
        ("verifier", CodeVerifier),
        ("task", ArithmeticTask),
        ("kl", K3),
        ("sampler", UniformSampler),
        ("engine", HFEngine),
    ]:
        reg.add(family, cls, "test-dist", "0")
    return reg


VALID: dict[str, Any] = {"task": {"name": "arithmetic"}, "verifiers": {"math": {}}}
"""The smallest valid config: a task (train and eval rows) and one verifier."""


def with_(**sections: Any) -> dict[str, Any]:
    """VALID with ``sections`` merged in one level deep (``None`` removes a section)."""
    data = copy.deepcopy(VALID)
    for name, table in sections.items():
        if table is None:
            data.pop(name, None)
        elif isinstance(table, dict) and isinstance(data.get(name), dict):
            data[name] = {**data[name], **table}
        else:
            data[name] = table
    return data


def issues(data: dict[str, Any], registry: ComponentRegistry) -> list[ConfigIssue]:
    with pytest.raises(ConfigError) as e:
        parse_config(data, registry, "arithmetic.toml")
    return e.value.issues


def messages_at(data: dict[str, Any], registry: ComponentRegistry) -> dict[str, str]:
    return {i.path: i.message for i in issues(data, registry)}


# ---------------------------------------------------------------------------------------------
# Valid configs
# ---------------------------------------------------------------------------------------------


def test_valid_config_parses_to_expected_values(registry: ComponentRegistry) -> None:
    data = with_(
        rollout={"temperature": 0.7, "stop_strings": ["\n\n"], "num_samples_per_prompt_rollout": 4},
        optim={"lr": 3e-4, "betas": [0.9, 0.95], "lr_scheduler": "cosine"},
        loss={"name": "cispo", "clip_higher": 4},
        kl={"beta": 0.01},
        task={"name": "arithmetic", "num_digits": 3},
        verifiers={"math": {"weight": 2, "strict": True}, "code": {}},
    )
    cfg = parse_config(data, registry)
    assert cfg.rollout.temperature == 0.7
    assert cfg.rollout.stop_strings == ("\n\n",)
    assert cfg.rollout.num_samples_per_prompt_rollout == 4
    assert cfg.optim.betas == (0.9, 0.95)
    assert cfg.optim.lr_scheduler == "cosine"
    assert cfg.loss == PluginSlot("cispo", CispoLoss.Config(clip_higher=4.0))
    assert isinstance(cfg.loss.config.clip_higher, float)  # int -> float is the one allowed widening
    assert cfg.kl == KLSlot("k3", 0.01, NoConfig())
    assert cfg.task == PluginSlot("arithmetic", ArithmeticTask.Config(num_digits=3))
    assert cfg.verifiers == {"math": MathVerifier.Config(weight=2.0, strict=True), "code": VerifierConfig()}
    assert cfg.trackers == {}


def test_absent_slots_take_schema_defaults_with_plugin_config_defaults(registry: ComponentRegistry) -> None:
    cfg = parse_config(VALID, registry)
    assert cfg.loss == PluginSlot("dapo", DapoLoss.Config())
    assert cfg.kl == KLSlot("k3", 0.0, NoConfig())
    assert cfg.sampler == PluginSlot("uniform", NoConfig())
    assert cfg.engine == EngineSlot("hf", HFEngine.Config(), num_engines=1)
    # A slot table without `name` configures the default component.
    assert parse_config(with_(loss={"clip_higher": 0.3}), registry).loss == PluginSlot(
        "dapo", DapoLoss.Config(clip_higher=0.3)
    )


# ---------------------------------------------------------------------------------------------
# Unknown keys, types, literals, validators
# ---------------------------------------------------------------------------------------------


def test_unknown_keys_are_errors_with_did_you_mean(registry: ComponentRegistry) -> None:
    data = with_(rollout={"temprature": 0.5}, loss={"clip_highr": 0.3}, kl={"bta": 0.1}, rolout={})
    assert messages_at(data, registry) == {
        "rollout.temprature": "unknown key (did you mean 'temperature'?)",
        "loss.clip_highr": "unknown key (did you mean 'clip_higher'?)",
        "kl.bta": "unknown key (did you mean 'beta'?)",
        "rolout": "unknown key (did you mean 'rollout'?)",
    }


def test_unknown_key_in_verifier_table(registry: ComponentRegistry) -> None:
    assert messages_at(with_(verifiers={"math": {"wieght": 1}}), registry) == {
        "verifiers.math.wieght": "unknown key (did you mean 'weight'?)"
    }


@pytest.mark.parametrize(
    ("section", "key", "value", "message"),
    [
        ("rollout", "response_length", "32", "expected an integer, got string '32'"),
        ("rollout", "response_length", True, "expected an integer, got boolean true"),
        ("rollout", "response_length", 3.0, "expected an integer, got float 3.0"),
        ("algorithm", "filter_zero_std_samples", 1, "expected a boolean, got integer 1"),
        ("rollout", "temperature", "hot", "expected a float, got string 'hot'"),
        ("rollout", "temperature", False, "expected a float, got boolean false"),
        ("run", "name", 7, "expected a string, got integer 7"),
        ("model", "revision", 3, "expected a string, got integer 3"),
        ("rollout", "stop_strings", "\n", "expected an array, got string '\\n'"),
        ("optim", "betas", [0.9], "expected an array of 2 items, got 1"),
        ("rollout", "stop_strings", {"a": 1}, "expected an array, got table"),
    ],
)
def test_wrong_types_are_errors(
    registry: ComponentRegistry, section: str, key: str, value: Any, message: str
) -> None:
    assert messages_at(with_(**{section: {key: value}}), registry) == {f"{section}.{key}": message}


def test_wrong_item_type_in_array_names_the_index(registry: ComponentRegistry) -> None:
    assert messages_at(with_(rollout={"stop_strings": ["a", 3]}), registry) == {
        "rollout.stop_strings[1]": "expected a string, got integer 3"
    }


def test_section_that_is_not_a_table(registry: ComponentRegistry) -> None:
    assert messages_at(with_(rollout=3, loss="dapo"), registry) == {
        "rollout": "expected a table, got integer 3",
        "loss": "expected a table, got string 'dapo'",
    }


def test_literal_lists_allowed_values(registry: ComponentRegistry) -> None:
    assert messages_at(with_(optim={"lr_scheduler": "cosin"}), registry) == {
        "optim.lr_scheduler": "must be one of 'constant', 'linear', 'cosine' (got 'cosin'; did you mean 'cosine'?)"
    }


def test_validator_messages_survive(registry: ComponentRegistry) -> None:
    data = with_(
        rollout={"top_p": 1.5, "temperature": -1},
        loss={"clip_higher": -0.1},
        verifiers={"math": {"weight": -2}},
        task={"difficulty": "medium"},
    )
    assert messages_at(data, registry) == {
        "rollout.top_p": "top_p must be in (0, 1], got 1.5",  # the schema's own validator
        "rollout.temperature": "must be > 0.0 (got -1.0)",  # attrs' gt(), reworded
        "loss.clip_higher": "must be >= 0 (got -0.1)",
        "verifiers.math.weight": "weight must be a number in [0, 1e+06] (scale rewards down), got -2.0",
        "task.difficulty": "must be in ['easy', 'hard'] (got 'medium')",  # attrs' in_(), name dropped
    }


def test_cross_field_validator_and_post_init_messages_survive(registry: ComponentRegistry) -> None:
    assert messages_at(with_(loss={"clip_lower": 0.5, "clip_higher": 0.3}), registry) == {
        "loss.clip_higher": "must be >= clip_lower (0.5), got 0.3"
    }
    assert messages_at(with_(loss={"name": "cispo", "mode": "seq"}), registry) == {
        "loss": "mode 'seq' needs clip_higher <= 1"
    }


# ---------------------------------------------------------------------------------------------
# Plugin names
# ---------------------------------------------------------------------------------------------


def test_unknown_plugin_name_lists_available_and_suggests(registry: ComponentRegistry) -> None:
    assert messages_at(with_(loss={"name": "dapoo", "clip_higher": 0.3}), registry) == {
        "loss.name": "no loss named 'dapoo' (did you mean 'dapo'?); available: cispo, dapo"
    }
    assert messages_at(with_(verifiers={"mth": {}}), registry) == {
        "verifiers.mth": "no verifier named 'mth' (did you mean 'math'?); available: code, math"
    }
    assert messages_at(with_(trackers={"wandb": {}}), registry) == {
        "trackers.wandb": "no tracker named 'wandb'; available: none"
    }


def test_missing_default_plugin_is_reported_as_default(registry: ComponentRegistry) -> None:
    reg = ComponentRegistry()
    for family, cls in [("verifier", MathVerifier), ("task", ArithmeticTask), ("kl", K3), ("engine", HFEngine)]:
        reg.add(family, cls, "test-dist", "0")
    reg.add("loss", CispoLoss, "test-dist", "0")
    reg.add("sampler", UniformSampler, "test-dist", "0")
    assert messages_at(VALID, reg) == {
        "loss.name": "no loss named 'dapo'; available: cispo (the default; set name to choose another)"
    }


def test_union_fields_are_strict_too(registry: ComponentRegistry) -> None:
    assert parse_config(with_(engine={"batch_size": 8}), registry).engine.config == HFEngine.Config(batch_size=8)
    assert messages_at(with_(engine={"batch_size": "8"}), registry) == {
        "engine.batch_size": "expected an integer, got string '8'"
    }


def test_unresolvable_plugin_annotations_are_a_plugin_error() -> None:
    class Local:
        pass

    class Odd(_Stubs):
        name = "odd"

        @attrs.frozen
        class Config:
            thing: Local | None = None  # a string annotation naming a class local to this test

    reg = ComponentRegistry()
    reg.add("loss", Odd, "odd-dist", "0")
    with pytest.raises(PluginError, match="cannot resolve the field types of .*Odd.Config"):
        parse_config({"loss": {"name": "odd"}}, reg)


def test_plugin_name_must_be_a_string_and_task_needs_one(registry: ComponentRegistry) -> None:
    data = {"loss": {"name": 3}, "task": {"num_digits": 3}, "verifiers": {"math": {}}}
    assert messages_at(data, registry) == {
        "loss.name": "expected a string, got integer 3",
        "task.name": "missing required key",
    }


# ---------------------------------------------------------------------------------------------
# Invariants
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sections", "path", "fragment"),
    [
        (
            {
                "algorithm": {"pack_length": 100},
                "data": {"max_prompt_token_length": 80},
                "rollout": {"response_length": 40},
            },
            "algorithm.pack_length",
            "must be >= data.max_prompt_token_length + rollout.response_length (80 + 40 = 120), got 100",
        ),
        (
            {"rollout": {"num_samples_per_prompt_rollout": 1}},
            "rollout.num_samples_per_prompt_rollout",
            "must be >= 2 when algorithm.filter_zero_std_samples is true",
        ),
        ({"verifiers": None}, "verifiers", "no verifier enabled"),
        ({"verifiers": {"math": {"weight": 0}}}, "verifiers", "every enabled verifier has weight 0"),
        ({"task": None, "train": {"local_eval_every": 0}}, "data", "no training data"),
        (
            {"data": {"train": [{"path": "a.jsonl"}]}},
            "data.train",
            "a [task] makes its own rows; remove [task] or the data.train sources",
        ),
        (
            {"data": {"eval": [{"path": "e.jsonl"}]}},
            "data.eval",
            "a [task] makes its own eval rows",
        ),
        (  # the default 10 runs without evaluations (a train-only config); a value the user chose asks for them
            {"task": None, "train": {"local_eval_every": 5}, "data": {"train": [{"path": "a.jsonl"}]}},
            "train.local_eval_every",
            "is 5 but there are no eval rows",
        ),
        (
            {"task": None, "train": {"local_eval_every": 0}, "data": {"train": [{"path": "a.jsonl", "verifier": "mth"}]}},
            "data.train[0].verifier",
            "'mth' is not an enabled verifier (did you mean 'math'?); enabled: math",
        ),
        (
            {"task": None, "train": {"local_eval_every": 0},
             "data": {"apply_chat_template": False, "train": [{"path": "a.jsonl", "system_prompt": "Be brief."}]}},
            "data.train[0].system_prompt",
            "needs data.apply_chat_template = true",
        ),
        (
            {"task": None, "data": {"train": [{"path": "a.jsonl"}], "eval": [{"path": "b.jsonl", "weight": 2.0}]}},
            "data.eval[0].weight",
            "must be <= 1 for an eval source (rows would repeat), got 2.0",
        ),
    ],
)
def test_each_invariant_fires_with_its_path(
    registry: ComponentRegistry, sections: dict[str, Any], path: str, fragment: str
) -> None:
    found = issues(with_(**sections), registry)
    assert [i.path for i in found] == [path]
    assert fragment in found[0].message


def test_invariants_accept_the_sources_they_allow(registry: ComponentRegistry) -> None:
    files = with_(
        task=None, data={"train": [{"path": "a.jsonl", "verifier": "math"}], "eval": [{"path": "b.jsonl"}]}
    )
    hf = with_(task=None, data={"train": [{"hf_dataset": "x/y", "subset": "main"}],
                                "eval": [{"hf_dataset": "x/y", "split": "test"}]})
    no_eval = with_(task=None, data={"train": [{"path": "a.jsonl"}]}, train={"local_eval_every": 0})
    for data in (files, hf, no_eval):
        parse_config(data, registry)
    single = with_(rollout={"num_samples_per_prompt_rollout": 1}, algorithm={"filter_zero_std_samples": False})
    parse_config(single, registry)


# ---------------------------------------------------------------------------------------------
# All at once, message format
# ---------------------------------------------------------------------------------------------


def test_all_errors_are_reported_at_once_each_on_its_own_line(registry: ComponentRegistry) -> None:
    data = with_(
        rollout={"temprature": 1.0, "top_p": 2.0, "response_length": "32"},
        loss={"clip_higher": -0.1},
        model={"dtype": "fp8"},
        verifiers={"math": {"strict": 1}, "mth": {}},
    )
    with pytest.raises(ConfigError) as e:
        parse_config(data, registry, "arithmetic.toml")
    paths = [i.path for i in e.value.issues]
    assert sorted(paths) == sorted(
        [
            "rollout.temprature",
            "rollout.top_p",
            "rollout.response_length",
            "loss.clip_higher",
            "model.dtype",
            "verifiers.math.strict",
            "verifiers.mth",
        ]
    )
    lines = str(e.value).splitlines()
    assert len(lines) == 7
    assert "arithmetic.toml: loss.clip_higher: must be >= 0 (got -0.1)" in lines
    assert "arithmetic.toml: rollout.temprature: unknown key (did you mean 'temperature'?)" in lines


def test_invariants_are_reported_together(registry: ComponentRegistry) -> None:
    data = with_(kl={"beta": 0.1, "reference": "none"}, algorithm={"pack_length": 10}, data={"eval": [{"path": "e.jsonl"}]})
    paths = [i.path for i in issues(data, registry)]
    assert paths == ["algorithm.pack_length", "data.eval", "kl.reference"]


def test_field_errors_and_invariants_are_reported_together(registry: ComponentRegistry) -> None:
    # Three field mistakes and a broken invariant: all four at once, not the invariant after the fixes.
    data = with_(rollout={"temprature": 1.0, "top_p": 2.0}, optim={"lr": -1}, algorithm={"pack_length": 10})
    with pytest.raises(ConfigError) as e:
        parse_config(data, registry, "run.toml")
    assert sorted(i.path for i in e.value.issues) == ["algorithm.pack_length", "optim.lr", "rollout.temprature",
                                                      "rollout.top_p"]
    # An invariant that reads a key with a mistake is not judged on that key's default.
    wrong_type = with_(rollout={"response_length": "8"}, algorithm={"pack_length": 40})  # 16 + 32 (default) > 40
    with pytest.raises(ConfigError) as e:
        parse_config(wrong_type, registry, "run.toml")
    assert [i.path for i in e.value.issues] == ["rollout.response_length"]


def test_a_warmup_longer_than_the_run_is_a_warning_not_an_error(registry: ComponentRegistry) -> None:
    cfg = parse_config(with_(optim={"warmup_steps": 10}, train={"total_steps": 3}), registry)
    assert config_warnings(cfg) == ["optim.warmup_steps = 10 is more than train.total_steps = 3: the run ends "
                                    "during warm-up, with the learning rate at 30% of optim.lr"]
    assert config_warnings(parse_config(with_(optim={"warmup_steps": 3}, train={"total_steps": 3}), registry)) == []


# ---------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------

VALID_TOML = """\
[task]
name = "arithmetic"

[verifiers.math]
weight = 1.0
"""


def test_load_config_reads_a_file(tmp_path: Path, registry: ComponentRegistry) -> None:
    path = tmp_path / "arithmetic.toml"
    path.write_text(VALID_TOML + '\n[rollout]\ntemperature = 0.5\n')
    assert load_config(path, registry).rollout.temperature == 0.5


def test_toml_syntax_error_names_file_line_and_column(tmp_path: Path, registry: ComponentRegistry) -> None:
    path = tmp_path / "broken.toml"
    path.write_text(VALID_TOML + "\n[rollout]\ntemperature = = 0.5\n")
    with pytest.raises(ConfigError) as e:
        load_config(path, registry)
    assert str(e.value).startswith(f"{path}: invalid TOML at line 8, column 15: ")


def test_missing_file(tmp_path: Path, registry: ComponentRegistry) -> None:
    with pytest.raises(ConfigError) as e:
        load_config(tmp_path / "nope.toml", registry)
    assert str(e.value) == f"{tmp_path / 'nope.toml'}: no such file"


# ---------------------------------------------------------------------------------------------
# --set overrides
# ---------------------------------------------------------------------------------------------


def test_override_values_are_toml_with_string_fallback() -> None:
    data = {"optim": {"lr": 1e-4}}
    out = apply_overrides(
        data,
        [
            "optim.lr=3e-4",
            "loss.name=cispo",
            'rollout.stop_strings=["\\n", "</answer>"]',
            "algorithm.filter_zero_std_samples=false",
            'run.name="quoted"',
            "run.output_dir=2024-01-01",  # a TOML date, but meant as a string
            "verifiers.math.weight=2",
        ],
    )
    assert out == {
        "optim": {"lr": 3e-4},
        "loss": {"name": "cispo"},
        "rollout": {"stop_strings": ["\n", "</answer>"]},
        "algorithm": {"filter_zero_std_samples": False},
        "run": {"name": "quoted", "output_dir": "2024-01-01"},
        "verifiers": {"math": {"weight": 2}},
    }
    assert data == {"optim": {"lr": 1e-4}}  # the input is not modified


def test_malformed_overrides_are_all_reported() -> None:
    with pytest.raises(ConfigError) as e:
        apply_overrides({"task": {"name": "arithmetic"}}, ["lr", "=3", "a..b=1", "task.name.x=1"])
    assert [i.message for i in e.value.issues] == [
        "malformed override 'lr': expected KEY=VALUE, e.g. rollout.temperature=0.7",
        "malformed override '=3': expected KEY=VALUE, e.g. rollout.temperature=0.7",
        "malformed override 'a..b=1': expected KEY=VALUE, e.g. rollout.temperature=0.7",
        "cannot apply 'task.name.x=1': task.name is string 'arithmetic', not a table",
    ]
    first = str(e.value).splitlines()[0]
    assert first == "--set: malformed override 'lr': expected KEY=VALUE, e.g. rollout.temperature=0.7"


def test_load_config_applies_overrides_and_blames_them(tmp_path: Path, registry: ComponentRegistry) -> None:
    path = tmp_path / "arithmetic.toml"
    path.write_text(VALID_TOML)
    cfg = load_config(path, registry, ["rollout.temperature=0.25", "verifiers.code.weight=0.5", "loss.name=cispo"])
    assert cfg.rollout.temperature == 0.25
    assert cfg.verifiers["code"] == VerifierConfig(weight=0.5)
    assert cfg.loss.name == "cispo"
    with pytest.raises(ConfigError) as e:
        load_config(path, registry, ["rollout.top_p=2", "verifiers.mth.weight=1"])
    assert str(e.value).splitlines() == [
        f"{path}: rollout.top_p: top_p must be in (0, 1], got 2.0 (from --set rollout.top_p=2)",
        f"{path}: verifiers.mth: no verifier named 'mth' (did you mean 'math'?); available: code, math "
        "(from --set verifiers.mth.weight=1)",
    ]


# ---------------------------------------------------------------------------------------------
# Dump and round trip
# ---------------------------------------------------------------------------------------------


def test_config_to_dict_writes_plugin_slots_with_all_fields(registry: ComponentRegistry) -> None:
    cfg = parse_config(with_(kl={"beta": 0.05}), registry)
    out = config_to_dict(cfg)
    assert out["loss"] == {"name": "dapo", "clip_lower": 0.2, "clip_higher": 0.28}
    assert out["kl"] == {
        "name": "k3",
        "beta": 0.05,
        "placement": "loss",
        "reference": "frozen",
        "ref_policy_update_freq": 1,
        "alpha": 0.6,
        "reference_dtype": "auto",
    }
    assert out["task"] == {"name": "arithmetic", "num_digits": 2, "operators": ["+", "-"], "difficulty": "easy"}
    assert out["engine"] == {"name": "hf", "num_engines": 1}  # batch_size is None: omitted
    assert out["verifiers"] == {"math": {"weight": 1.0, "strict": False}}
    assert "revision" not in out["model"]


def test_dump_round_trips(registry: ComponentRegistry) -> None:
    data = with_(
        run={"name": 'tricky "name"\twith\\escapes'},
        rollout={"stop_strings": ["\n", "</answer>", "\x7f"], "temperature": 0.7},
        optim={"lr": 3e-4, "betas": [0.9, 0.95]},
        loss={"name": "cispo", "clip_higher": 4.0},
        kl={"beta": 0.01},
        engine={"batch_size": 8},
        task={"name": "arithmetic", "operators": ["*"]},
        verifiers={"math": {"weight": 0.5}, "code": {}},
        train={"max_runtime_s": float("inf")},
    )
    cfg = parse_config(data, registry)
    text = dump_config_toml(cfg)
    assert "[verifiers.code]\nweight = 1.0\n" in text
    assert parse_config(tomllib.loads(text), registry) == cfg


def test_dump_round_trips_an_empty_verifier_table(registry: ComponentRegistry) -> None:
    reg = ComponentRegistry()
    for entry in registry:
        reg.add(entry.family, entry.cls, entry.distribution, entry.version)

    class Exact(_Stubs):
        name = "exact"
        Config = NoConfig

    reg.add("verifier", Exact, "test-dist", "0")
    cfg = parse_config(with_(verifiers={"math": {}, "exact": {}}), reg)
    text = dump_config_toml(cfg)
    assert "[verifiers.exact]\n" in text
    assert parse_config(tomllib.loads(text), reg) == cfg


# ---------------------------------------------------------------------------------------------
# Algorithm, KL and checkpoint keys of issue 4
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sections", "path", "fragment"),
    [
        ({"algorithm": {"loss_denominator": -1}}, "algorithm.loss_denominator", 'must be "token" or a positive number, got -1.0'),
        ({"algorithm": {"loss_denominator": 0}}, "algorithm.loss_denominator", 'must be "token" or a positive number, got 0.0'),
        ({"algorithm": {"loss_denominator": float("nan")}}, "algorithm.loss_denominator", "positive number, got nan"),
        (
            {"algorithm": {"loss_denominator": 512, "loss_aggregation": "seq-mean-token-sum"}},
            "algorithm.loss_denominator",
            'has none; use "token-mean" (sum / C) or "seq-mean-token-mean"',
        ),
        ({"kl": {"beta": 0.05, "reference": "none"}}, "kl.reference", 'is "none" but kl.beta = 0.05 > 0'),
        (
            {"algorithm": {"use_engine_logprobs_as_old": True, "mismatch_correction": "token-truncate"}},
            "algorithm.mismatch_correction",
            'must be "none" when algorithm.use_engine_logprobs_as_old is true',
        ),
        (
            {"checkpoint": {"dir": "/ckpt", "save_final": False}},
            "checkpoint.dir",
            "is set but nothing is saved there",
        ),
    ],
)
def test_issue4_invariants_fire_with_their_path(
    registry: ComponentRegistry, sections: dict[str, Any], path: str, fragment: str
) -> None:
    found = issues(with_(**sections), registry)
    assert [i.path for i in found] == [path]
    assert fragment in found[0].message


def test_loss_denominator_type_and_valid_values(registry: ComponentRegistry) -> None:
    assert messages_at(with_(algorithm={"loss_denominator": "tokens"}), registry) == {
        "algorithm.loss_denominator": "expected 'token' or a number (as text too: \"1024\"), got string 'tokens'"
    }
    assert parse_config(with_(algorithm={"loss_denominator": 256}), registry).algorithm.loss_denominator == 256.0
    # Open Instruct's string form of a constant denominator.
    assert parse_config(with_(algorithm={"loss_denominator": "1024"}), registry).algorithm.loss_denominator == 1024.0
    assert parse_config(VALID, registry).algorithm.loss_denominator == "token"


def test_mismatch_and_kl_key_validation(registry: ComponentRegistry) -> None:
    data = with_(
        algorithm={"mismatch_correction": "token-clip", "mismatch_upper": 0.0},
        kl={"placement": "rewards", "alpha": 1.5, "ref_policy_update_freq": 0},
    )
    assert messages_at(data, registry) == {
        "algorithm.mismatch_correction": "must be one of 'none', 'token-truncate', 'token-mask', 'sequence-truncate', "
        "'sequence-mask' (got 'token-clip'; did you mean 'token-mask'?)",
        "algorithm.mismatch_upper": "must be > 0.0 (got 0.0)",
        "kl.placement": "must be one of 'loss', 'reward' (got 'rewards'; did you mean 'reward'?)",
        "kl.alpha": "must be <= 1.0 (got 1.5)",
        "kl.ref_policy_update_freq": "must be > 0 (got 0)",
    }
    assert messages_at(with_(algorithm={"mismatch_correction": "token-mask", "mismatch_lower": 3.0}), registry) == {
        "algorithm.mismatch_lower": "must be < mismatch_upper (2.0), got 3.0"
    }


def test_kl_core_keys_are_not_plugin_keys(registry: ComponentRegistry) -> None:
    kl = {"beta": 0.1, "placement": "reward", "reference": "polyak", "ref_policy_update_freq": 4, "alpha": 0.5}
    cfg = parse_config(with_(kl=kl), registry)
    assert cfg.kl == KLSlot(
        "k3", 0.1, NoConfig(), placement="reward", reference="polyak", ref_policy_update_freq=4, alpha=0.5
    )
    assert parse_config(tomllib.loads(dump_config_toml(cfg)), registry) == cfg
    assert messages_at(with_(kl={"placment": "loss"}), registry) == {
        "kl.placment": "unknown key (did you mean 'placement'?)"
    }


def test_a_component_config_contributes_run_rules() -> None:
    @attrs.frozen
    class PickyConfig:
        needs_filter: bool = True

        def check_run(self, run: Any) -> list[ConfigIssue]:
            if self.needs_filter and not run.algorithm.filter_zero_std_samples:
                return [ConfigIssue("algorithm.filter_zero_std_samples", "must be true for the picky sampler")]
            return []

    class PickySampler(_Stubs):
        name = "picky"
        Config = PickyConfig

    reg = ComponentRegistry()
    for family, cls in [("loss", DapoLoss), ("verifier", MathVerifier), ("task", ArithmeticTask), ("kl", K3),
                        ("sampler", UniformSampler), ("sampler", PickySampler), ("engine", HFEngine)]:
        reg.add(family, cls, "test-dist", "0")
    data = with_(sampler={"name": "picky"}, algorithm={"filter_zero_std_samples": False})
    assert messages_at(data, reg) == {"algorithm.filter_zero_std_samples": "must be true for the picky sampler"}
    parse_config(with_(sampler={"name": "picky"}), reg)
    parse_config(with_(sampler={"name": "picky", "needs_filter": False}, algorithm={"filter_zero_std_samples": False}), reg)


def test_a_failing_component_rule_is_an_issue_naming_the_component() -> None:
    @attrs.frozen
    class BrokenConfig:
        def check_run(self, run: Any) -> list[ConfigIssue]:
            raise KeyError("oops")

    class BrokenLoss(_Stubs):
        name = "broken"
        Config = BrokenConfig

    reg = ComponentRegistry()
    for family, cls in [("loss", BrokenLoss), ("loss", DapoLoss), ("verifier", MathVerifier), ("task", ArithmeticTask),
                        ("kl", K3), ("sampler", UniformSampler), ("engine", HFEngine)]:
        reg.add(family, cls, "test-dist", "0")
    assert messages_at(with_(loss={"name": "broken"}), reg) == {"loss": "its config check raised KeyError: 'oops'"}


HERE = __name__
"""This module's import name (pytest's importlib mode decides it), for import-path component names."""


def test_loss_by_import_path_is_structured_with_its_config(registry: ComponentRegistry) -> None:
    cfg = parse_config(with_(loss={"name": f"{HERE}:CispoLoss", "clip_higher": 3}), registry)
    assert cfg.loss == PluginSlot(f"{HERE}:CispoLoss", CispoLoss.Config(clip_higher=3.0))
    assert registry.get("loss", f"{HERE}:CispoLoss") is CispoLoss
    assert messages_at(with_(loss={"name": f"{HERE}:CispoLoss", "clip_highr": 3}), registry) == {
        "loss.clip_highr": "unknown key (did you mean 'clip_higher'?)"
    }


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("no_such_module_xyz:Loss", "loss 'no_such_module_xyz:Loss': no module named 'no_such_module_xyz'"),
        (f"{HERE}:CispoLos", f"loss '{HERE}:CispoLos': module '{HERE}' has no attribute 'CispoLos' "
                                 "(did you mean 'CispoLoss'?)"),
        (f"{HERE}:VALID", f"loss '{HERE}:VALID' is not a valid loss component: it is dict"),
        (f"{HERE}:ComponentRegistry", "is not a valid loss component: it needs a non-empty string class "
                                          "attribute 'name'"),
        (f"{HERE}:", "an import path must look like 'package.module:ClassName'"),
    ],
)
def test_import_path_errors_are_config_errors_at_the_name(registry: ComponentRegistry, name: str, message: str) -> None:
    found = messages_at(with_(loss={"name": name}), registry)
    assert list(found) == ["loss.name"] and message in found["loss.name"]


def test_rewards_past_1e6_are_refused_when_the_config_is_read(tmp_path: Path, registry: ComponentRegistry) -> None:
    """A weight of 1e308 made every reward ``inf``: the learner skipped each update and the run
    ended with exit 0 having learnt nothing. Each factor of a reward is bounded like
    ``environment.reward_range``, naming the key."""
    path = tmp_path / "arithmetic.toml"
    path.write_text(VALID_TOML)
    with pytest.raises(ConfigError) as e:
        load_config(path, registry, ["verifiers.math.weight=1e308", "scoring.verification_reward=1e7"])
    assert str(e.value).splitlines() == [
        f"{path}: scoring.verification_reward: must be <= 1000000.0 (got 10000000.0) "
        "(from --set scoring.verification_reward=1e7)",
        f"{path}: verifiers.math.weight: weight must be a number in [0, 1e+06] (scale rewards down), got 1e+308 "
        "(from --set verifiers.math.weight=1e308)",
    ]
    assert load_config(path, registry, ["verifiers.math.weight=1e6"]).verifiers["math"].weight == 1e6


def test_a_low_precision_polyak_reference_is_a_warning(registry: ComponentRegistry) -> None:
    polyak = {"beta": 0.01, "reference": "polyak", "alpha": 0.05}
    cfg = parse_config(with_(kl={**polyak, "reference_dtype": "bfloat16"}), registry)
    # bf16 keeps 8 significant bits: half a unit in the last place is 2^-9..2^-8 of a weight.
    assert config_warnings(cfg) == [
        'kl.reference_dtype = "bfloat16" with kl.reference = "polyak": each update moves a reference weight by '
        "kl.alpha = 0.05 times its distance to the policy, and bfloat16 rounds away moves below 0.20%-0.39% of "
        'the weight, so the reference stalls where it is close to the policy; "auto" keeps a Polyak reference '
        "in model.dtype (float32)"
    ]
    assert cfg.kl.reference_dtype_for("float32", "bfloat16", "cuda:0") == "bfloat16"
    # "auto" keeps the Polyak reference in model.dtype; a frozen one in bf16 is not warned about.
    auto = parse_config(with_(kl=polyak, model={"autocast": "bfloat16"}), registry)
    assert config_warnings(auto) == [] and auto.kl.reference_dtype_for("float32", "bfloat16", "cuda:0") == "float32"
    frozen = parse_config(with_(kl={"beta": 0.01, "reference_dtype": "bfloat16"}), registry)
    assert config_warnings(frozen) == []
    assert frozen.kl.reference_dtype_for("float32", "none", "cpu") == "bfloat16"


@pytest.mark.parametrize(("model_dtype", "autocast", "device", "held"), [
    ("float32", "bfloat16", "cuda:0", "bfloat16"),  # the compute dtype on CUDA
    ("float32", "none", "cuda", "float32"),
    ("bfloat16", "none", "cuda", "bfloat16"),
    ("float16", "none", "cuda:1", "float16"),
    ("float32", "bfloat16", "cpu", "float32"),  # model.dtype on the CPU
])
def test_an_auto_reference_is_held_in_the_compute_dtype_on_cuda(
    registry: ComponentRegistry, model_dtype: str, autocast: str, device: str, held: str
) -> None:
    cfg = parse_config(with_(kl={"beta": 0.01}), registry)
    assert cfg.kl.reference_dtype == "auto"
    assert cfg.kl.reference_dtype_for(model_dtype, autocast, device) == held


def test_an_unknown_reference_dtype_names_the_key(registry: ComponentRegistry) -> None:
    with pytest.raises(ConfigError, match=r"kl\.reference_dtype"):
        parse_config(with_(kl={"beta": 0.01, "reference_dtype": "float8"}), registry)
