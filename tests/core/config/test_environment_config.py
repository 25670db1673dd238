"""The [environment], [renderer] and [tools.<name>] sections are checked like every other section:
one line per mistake, with its key path, before any model loads."""

from __future__ import annotations

from grpo_run.cli.main import main
from support.paths import EXAMPLES

EXAMPLE = EXAMPLES / "calculator-tool.toml"


def test_the_calculator_tool_example_is_valid(capsys):
    assert main(["check", str(EXAMPLE)]) == 0


def test_mistakes_in_the_environment_sections_name_their_keys(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text(
        EXAMPLE.read_text()
        .replace("max_turns = 2", "max_turns = 0\nmax_turn = 3")
        .replace('on_error = "message"', 'on_error = "ignore"')
        .replace('name = "tiny-chat"', 'name = "tiny-chatt"')
        .replace("[tools.calculator]", "[tools.calculater]")
    )
    assert main(["check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.toml: environment.max_turns: must be > 0 (got 0)" in err
    assert "bad.toml: environment.max_turn: unknown key (did you mean 'max_turns'?)" in err
    assert "bad.toml: environment.on_error: must be one of 'message', 'end' (got 'ignore')" in err
    assert "bad.toml: renderer.name: no renderer named 'tiny-chatt' (did you mean 'tiny-chat'?)" in err
    assert "bad.toml: tools.calculater: no tool named 'calculater' (did you mean 'calculator'?)" in err
    assert "Traceback" not in err


def test_an_environment_needs_no_renderer_table_but_budgets_that_fit(tmp_path, capsys):
    no_renderer = tmp_path / "no_renderer.toml"
    no_renderer.write_text(EXAMPLE.read_text().replace('[renderer]\nname = "tiny-chat"\n', ""))
    assert "[renderer]" not in no_renderer.read_text()
    assert main(["check", str(no_renderer)]) == 0  # the model's own format is chosen when the run starts
    assert main(["check", str(EXAMPLE), "--set", "environment.max_tokens_per_turn=40"]) == 2
    assert "environment.max_tokens_per_turn: must be <= rollout.response_length (32), got 40" in capsys.readouterr().err
    assert main(["check", str(EXAMPLE), "--set", "environment.train_on_env_tokens=true",
                 "--set", "algorithm.use_engine_logprobs_as_old=true"]) == 2
    assert "environment tokens have no engine log-probs" in capsys.readouterr().err


def test_an_environment_without_a_per_turn_limit_writes_its_run_config(tmp_path):
    """`max_tokens_per_turn` left out (None: the episode's budget) used to stop every run at start:
    the run's config.toml could not be written ("cannot write NoneType None as TOML")."""
    import tomllib

    from grpo_run.core.config import dump_config_toml, parse_config
    from grpo_run.core.plugins.host import build_plugin_host

    data = tomllib.loads(EXAMPLE.read_text().replace("max_tokens_per_turn = 18", ""))
    registry = build_plugin_host().registry
    cfg = parse_config(data, registry)
    assert cfg.environment.max_tokens_per_turn is None
    written = tomllib.loads(dump_config_toml(cfg))
    assert "max_tokens_per_turn" not in written["environment"]
    assert parse_config(written, registry) == cfg
