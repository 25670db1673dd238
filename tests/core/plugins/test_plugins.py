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
    ("model", "smollm2-135m-instruct"),
    ("environment", "tools"),
    ("environment", "guess-a-digit"),
    ("environment", "counter"),
    ("renderer", "chat-template"),
    ("renderer", "tiny-chat"),
    ("tool", "calculator"),
    ("tool", "python"),
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
    assert len(hooks) == 15
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


# -- the host checks each plugin as it loads ---------------------------------------------------


def _fake_distribution(root, dist: str, module: str, source: str):
    """A distribution with a `grpo_run` entry point, installed by putting ``root`` on sys.path
    (importlib.metadata finds its .dist-info like pip's)."""
    (root / f"{module}.py").write_text(source)
    info = root / f"{dist.replace('-', '_')}-1.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.2.3\n")
    (info / "entry_points.txt").write_text(f"[grpo_run]\nmine = {module}\n")
    return root


MISSPELT = '''
import grpo_run

@grpo_run.hookimpl
def grpo_run_register_verifier(register):
    pass
'''


def test_a_misspelt_hook_is_a_startup_error_naming_the_plugin(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(_fake_distribution(tmp_path, "grpo-run-typo", "typo_plugin", MISSPELT)))
    with pytest.raises(PluginError) as err:
        build_plugin_host()
    message = str(err.value)
    assert "'mine' (typo_plugin) from distribution 'grpo-run-typo'" in message
    assert "'grpo_run_register_verifier' is not a grpo-run hook (did you mean 'grpo_run_register_verifiers'?)" in message
    assert "GRPO_RUN_DISABLE_PLUGIN_AUTOLOAD=1" in message
    tolerant = build_plugin_host(tolerate_broken=True)
    assert [(b.distribution, b.version) for b in tolerant.broken] == [("grpo-run-typo", "1.2.3")]
    assert tolerant.registry.has("verifier", "math")


def test_the_cli_reports_a_misspelt_hook_without_a_traceback(tmp_path):
    import os
    import subprocess
    import sys

    root = _fake_distribution(tmp_path, "grpo-run-typo", "typo_plugin", MISSPELT)
    env = {**os.environ, "PYTHONPATH": str(root)}
    proc = subprocess.run([sys.executable, "-m", "grpo_run.cli.main", "check", "x.toml"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "error: plugin 'mine' (typo_plugin) from distribution 'grpo-run-typo'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_an_exception_in_a_registration_hook_names_its_plugin():
    class Raising:
        __name__ = "raising_plugin"

        @staticmethod
        @grpo_run.hookimpl
        def grpo_run_register_losses(register):
            raise RuntimeError("cannot find my weights")

    with pytest.raises(PluginError, match=r"from distribution 'boom-dist': grpo_run_register_losses raised "
                                          r"RuntimeError: cannot find my weights"):
        build_plugin_host(extra_plugins=[(Raising(), "boom-dist")])


def test_a_hook_with_wrong_argument_names_names_its_plugin():
    class WrongArgs:
        __name__ = "wrong_args"

        @staticmethod
        @grpo_run.hookimpl
        def grpo_run_register_losses(registrar):
            pass

    with pytest.raises(PluginError, match=r"'wrong_args' from distribution 'args-dist'.*registrar"):
        build_plugin_host(extra_plugins=[(WrongArgs(), "args-dist")])


def test_a_class_missing_its_contract_methods_is_refused():
    class NoCall:
        name = "no-call"

        @attrs.frozen
        class Config:
            pass

    registry = ComponentRegistry()
    with pytest.raises(PluginError, match=r"lacks '__call__' of the loss contract \(grpo_run.Loss\)"):
        registry.add("loss", NoCall, "dist", "0")


def test_the_families_table_matches_the_hooks_and_the_config():
    import typing

    from grpo_run.core.config.schema import RunConfig
    from grpo_run.core.plugins import hookspecs
    from grpo_run.core.plugins.families import FAMILIES, LOSS, VERIFIER

    hooks = {n for n in dir(hookspecs) if n.startswith("grpo_run_register_")}
    assert {f.hook for f in FAMILIES} == hooks
    fields = typing.get_type_hints(RunConfig)
    for fam in FAMILIES:
        if fam.slot is not None:
            assert fam.slot in fields, fam
            assert (typing.get_origin(fields[fam.slot]) is dict) == fam.many, fam
    registry = build_plugin_host().registry
    loss_cls: type[grpo_run.Loss] = registry.get(LOSS, "dapo")  # typed: type[Loss]
    assert loss_cls.name == "dapo" and registry.get(VERIFIER, "math").name == "math"


def test_the_plugins_command_lists_a_broken_plugin_instead_of_stopping(tmp_path, monkeypatch, capsys):
    root = _fake_distribution(tmp_path, "grpo-run-broken", "broken_plugin", "raise ImportError('no libfoo.so')\n")
    monkeypatch.syspath_prepend(str(root))
    assert main(["plugins"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # table cells may wrap
    assert "grpo-run-broken" in out and "cannot be imported: ImportError: no libfoo.so" in out
    assert "GRPO_RUN_DISABLE_PLUGIN_AUTOLOAD=1" in out
    assert "exact-match" in out  # the healthy plugins are still listed
    assert main(["check", "whatever.toml"]) == 2
    assert "no libfoo.so" in capsys.readouterr().err


def test_a_distribution_vanishing_mid_start_is_reported_not_a_crash(tmp_path, monkeypatch, capsys):
    """`pip uninstall` beside a starting run removes a package's files one by one: here its module
    and METADATA are gone while its entry point is still listed. The error handler must report that
    (one line, exit 2), not fail itself on the missing name."""
    root = _fake_distribution(tmp_path, "grpo-run-leaving", "leaving_plugin", "")
    (root / "leaving_plugin.py").unlink()
    (root / "grpo_run_leaving-1.2.3.dist-info" / "METADATA").unlink()
    monkeypatch.syspath_prepend(str(root))
    with pytest.raises(PluginError, match=r"from distribution '<unknown>': cannot be imported: ModuleNotFoundError"):
        build_plugin_host()
    assert [(b.distribution, b.version) for b in build_plugin_host(tolerate_broken=True).broken] == [("<unknown>", "?")]
    assert main(["score", "whatever.jsonl", "--output", str(tmp_path / "out.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "error: plugin 'mine' (leaving_plugin) from distribution '<unknown>'" in err
    assert main(["plugins"]) == 0
    assert "leaving_plugin" in capsys.readouterr().out

def test_a_plugin_that_exits_at_import_is_a_plugin_error_not_a_silent_exit(tmp_path):
    import os
    import subprocess
    import sys

    root = _fake_distribution(tmp_path, "grpo-run-quitter", "quitter_plugin", "import sys\nsys.exit(3)\n")
    env = {**os.environ, "PYTHONPATH": str(root)}

    def grpo_run(*args):
        return subprocess.run([sys.executable, "-m", "grpo_run.cli.main", *args], env=env,
                              capture_output=True, text=True, timeout=120)

    checked = grpo_run("check", "x.toml")
    assert checked.returncode == 2
    assert checked.stderr.strip().splitlines() == [
        "error: plugin 'mine' (quitter_plugin) from distribution 'grpo-run-quitter': cannot be imported: "
        "SystemExit: it called sys.exit(3); to run without third-party plugins set GRPO_RUN_DISABLE_PLUGIN_AUTOLOAD=1"
    ]
    listed = grpo_run("plugins")
    assert listed.returncode == 0
    out = " ".join(listed.stdout.split())
    assert "grpo-run-quitter" in out and "sys.exit(3)" in out and "exact-match" in out


def _grpo_run_cli(root, *args):
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "grpo_run.cli.main", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def test_a_keyboard_interrupt_at_a_plugins_import_names_the_plugin(tmp_path):
    root = _fake_distribution(tmp_path, "grpo-run-stopper", "stopper_plugin", "raise KeyboardInterrupt\n")
    checked = _grpo_run_cli(root, "check", "x.toml")
    assert checked.returncode == 130
    assert checked.stderr.strip().splitlines() == [
        "interrupted while importing plugin 'mine' (stopper_plugin) from distribution 'grpo-run-stopper'; if it "
        "was no Ctrl-C, the plugin raised KeyboardInterrupt: to run without third-party plugins set "
        "GRPO_RUN_DISABLE_PLUGIN_AUTOLOAD=1"
    ]


TWICE = '''
import attrs
import grpo_run

@attrs.frozen
class Config(grpo_run.VerifierConfig):
    pass

class {cls}:
    name = "twin"
    Config = Config

    def score(self, completion, ground_truth, row):
        return 0.0

@grpo_run.hookimpl
def grpo_run_register_verifiers(register):
    register({cls})
'''


def test_one_distribution_registering_a_name_twice_is_told_so_not_to_uninstall(tmp_path):
    _fake_distribution(tmp_path, "grpo-run-twins", "twin_a", TWICE.format(cls="TwinA"))
    (tmp_path / "twin_b.py").write_text(TWICE.format(cls="TwinB"))
    (tmp_path / "grpo_run_twins-1.2.3.dist-info" / "entry_points.txt").write_text(
        "[grpo_run]\nmine = twin_a\nalso = twin_b\n")
    checked = _grpo_run_cli(tmp_path, "check", "x.toml")
    assert checked.returncode == 2
    err = " ".join(checked.stderr.split())
    assert "uninstall" not in err and "Traceback" not in err
    assert ("distribution 'grpo-run-twins' registers a verifier named 'twin' twice: twin_a.TwinA (entry point "
            "'mine = twin_a') and twin_b.TwinB (entry point 'also = twin_b'); give each class its own 'name', "
            "or register it once") in err or ("twin_b.TwinB (entry point 'also = twin_b') and twin_a.TwinA "
                                              "(entry point 'mine = twin_a')") in err, err
