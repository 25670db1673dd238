"""The quick commands stay quick: ``--version``, ``--help``, shell completion, ``plugins`` and
``check`` never import torch or transformers (seconds of CPU each; they validate a config and list
plugin names without a model). Each runs as a user runs it, in a process of its own, with a spy on
the import system that notes any attempt to import either (written at once, so completion's
``os._exit`` cannot hide it).

Third-party plugins are off (``GRPO_RUN_DISABLE_PLUGIN_AUTOLOAD``): the test environment's
example plugins import torch at their top, as a plugin may; this checks grpo-run's own code.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from support.paths import EXAMPLES

SPY = """
import sys

class HeavyImportSpy:
    def find_spec(self, name, path=None, target=None):
        if name in ("torch", "transformers"):
            with open(sys.argv[1], "a") as noted:
                noted.write(name + "\\n")
        return None

sys.meta_path.insert(0, HeavyImportSpy())
from grpo_run.cli.main import main
sys.exit(main(sys.argv[2:]))
"""

COMMANDS = {
    "version": (["--version"], "grpo-run "),
    "help": (["--help"], "usage: grpo-run"),
    "plugins": (["plugins"], "components"),
    "check": (["check", str(EXAMPLES / "arithmetic.toml")], "arithmetic.toml: ok"),
    "check-reasoning-gym": (["check", str(EXAMPLES / "reasoning_gym.toml")], "reasoning_gym.toml: ok"),
}


def _run(args: list[str], noted, **env: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "GRPO_RUN_DISABLE_PLUGIN_AUTOLOAD": "1", "COLUMNS": "200", **env}
    return subprocess.run([sys.executable, "-c", SPY, str(noted), *args], capture_output=True, text=True,
                          env=environment, timeout=300)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_quick_commands_import_neither_torch_nor_transformers(name, tmp_path) -> None:
    args, expected = COMMANDS[name]
    noted = tmp_path / "heavy-imports"
    done = _run(args, noted)
    assert done.returncode == 0, done.stderr[-2000:]
    assert expected in done.stdout
    assert not noted.exists(), f"grpo-run {' '.join(args)} imported {noted.read_text().split()}"


def test_shell_completion_imports_neither_torch_nor_transformers(tmp_path) -> None:
    noted, out = tmp_path / "heavy-imports", tmp_path / "completions"
    done = _run([], noted, _ARGCOMPLETE="1", COMP_LINE="grpo-run ch", COMP_POINT="11",
                _ARGCOMPLETE_STDOUT_FILENAME=str(out), _ARGCOMPLETE_IFS="\n")
    assert done.returncode == 0, done.stderr[-2000:]
    assert out.read_text().split() == ["check"]
    assert not noted.exists(), f"completion imported {noted.read_text().split()}"


def test_the_spy_sees_an_import(tmp_path) -> None:
    """The spy can fail the tests above: checking a CUDA device needs torch, and it sees that."""
    noted = tmp_path / "heavy-imports"
    _run(["check", str(EXAMPLES / "arithmetic.toml"), "--set", "model.device=cuda:7"], noted)
    assert noted.read_text().split()[0] == "torch"
