"""Plugin discovery through entry points, the registry's rules, and the `plugins` command."""

from __future__ import annotations

import attrs
import pytest

import grpo_run
from support.paths import DOCS
from grpo_run.cli.main import main
from grpo_run.core.errors import PluginError, UnknownComponentError
from grpo_run.core.plugins.host import DISABLE_AUTOLOAD_ENV, build_plugin_host
from grpo_run.core.plugins.registry import ComponentRegistry

BUILTINS = {
    ("verifier", "math"),
    ("loss", "dapo"),
    ("kl", "k3"),
    ("sampler", "uniform"),
    ("engine", "hf"),
    ("task", "arithmetic"),
    ("model", "tiny-arithmetic"),
    ("model", "tiny-random"),
}


def test_builtins_come_from_grpo_runs_own_entry_points(plugin_host):
    found = {(e.family.key, e.name): e.distribution for e in plugin_host.registry}
    for key in BUILTINS:
        assert found[key] == "grpo-run", key


def test_third_party_distribution_is_discovered(plugin_host):
    entry = plugin_host.registry.entry("verifier", "exact-match")
    assert entry.distribution == "grpo-run-example-plugin"
    assert entry.version == "0.3.1"
    assert ("grpo-run-example-plugin", "0.3.1") in plugin_host.distributions()


def test_autoload_switch_keeps_builtins_only(monkeypatch):
    monkeypatch.setenv(DISABLE_AUTOLOAD_ENV, "1")
    host = build_plugin_host()
    assert not host.registry.has("verifier", "exact-match")
    assert host.registry.has("verifier", "math")


class _DuplicateMath:
    @staticmethod
    @grpo_run.hookimpl
    def grpo_run_register_verifiers(register):
        @attrs.frozen
        class Config(grpo_run.VerifierConfig):
            pass

        class OtherMath:
            name = "math"

            def score(self, completion, ground_truth, row):
                return 0.0

        OtherMath.Config = Config
        register(OtherMath)


def test_duplicate_component_names_both_distributions():
    with pytest.raises(PluginError) as err:
        build_plugin_host(extra_plugins=[(_DuplicateMath(), "grpo-run-rival-math")])
    message = str(err.value)
    assert "verifier named 'math'" in message
    assert "'grpo-run'" in message and "'grpo-run-rival-math'" in message


def test_registry_rejects_malformed_components():
    registry = ComponentRegistry()

    class NoName:
        Config = grpo_run.NoConfig

    class NoConfig:
        name = "x"

    with pytest.raises(PluginError, match="non-empty string class attribute 'name'"):
        registry.add("loss", NoName, "dist-a", "1")
    with pytest.raises(PluginError, match="'Config' that is an attrs class"):
        registry.add("loss", NoConfig, "dist-a", "1")


def test_unknown_component_suggests_close_name(plugin_host):
    with pytest.raises(UnknownComponentError) as err:
        plugin_host.registry.get("loss", "dapoo")
    assert "did you mean 'dapo'" in str(err.value)
    assert "available: " in str(err.value) and "dapo" in str(err.value).split("available: ")[1]


def test_lifecycle_hook_failures_are_reported_not_raised():
    class Boom:
        @staticmethod
        @grpo_run.hookimpl
        def grpo_run_step_end(step, metrics):
            raise RuntimeError("tracker down")

    host = build_plugin_host(extra_plugins=[(Boom(), "boom-dist")])
    failures = host.notify("grpo_run_step_end", step=3, metrics={"a": 1.0})
    assert len(failures) == 1 and "tracker down" in failures[0]


def test_plugins_command_lists_distributions_and_components(capsys):
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "grpo-run-example-plugin" in out and "0.3.1" in out
    assert "exact-match" in out
    for family, name in BUILTINS:
        assert name in out


def test_every_hook_is_documented():
    from grpo_run.core.plugins import hookspecs

    hooks = [n for n in dir(hookspecs) if n.startswith("grpo_run_")]
    assert len(hooks) == 11
    for name in hooks:
        doc = getattr(hookspecs, name).__doc__ or ""
        assert "Called" in doc, f"{name} does not say when it is called"


def test_every_hook_is_in_the_plugin_docs_with_its_signature():
    """datasette's habit: the documented surface cannot drift from the hookspecs."""
    import inspect
    from pathlib import Path

    from grpo_run.core.plugins import hookspecs

    doc = (DOCS / "plugins.md").read_text()
    for name in (n for n in dir(hookspecs) if n.startswith("grpo_run_")):
        sig = inspect.signature(getattr(hookspecs, name))
        params = ", ".join(
            f"{p.name}: {p.annotation}" for p in sig.parameters.values()
        )
        assert f"`{name}({params}) -> None`" in doc, name
