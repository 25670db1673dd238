"""Every TOML snippet and every ``grpo-run`` command in README.md and docs/ works as written.

A TOML snippet is a run config that passes ``grpo-run check``'s config checks on its own (keys,
types, plugin names, cross-section rules: :func:`parse_config`; its data files and model are not
read, since a snippet names files the reader has, such as ``train.jsonl``). A snippet that only
shows part of a config says so with ``<!-- fragment -->`` on the line before its fence: it is
checked merged into the embedded example (examples/arithmetic.toml), a plugin table whose ``name``
differs replacing the example's. ``<!-- pyproject.toml -->`` marks a packaging snippet: it must
declare the ``grpo_run`` entry-point group. A command (a ``grpo-run`` line in a shell block, or an
inline ``grpo-run ...`` code span) must parse with the CLI's own argument parser.
"""

from __future__ import annotations

import copy
import re
import shlex
import sys
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from grpo_run.cli.main import _parser, command_words
from grpo_run.core.config.loading import parse_config
from grpo_run.core.errors import ConfigError
from support.paths import DOCS, EXAMPLES, REPO

PAGES = [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>\S*)\s*$")
SHELL = {"", "bash", "sh", "shell", "console"}
MARKERS = ("<!-- fragment -->", "<!-- pyproject.toml -->")
PLUGIN_TABLES = ("loss", "kl", "sampler", "engine", "task")
OPTIONAL_PACKAGE = re.compile(r"needs the \w+ package: pip install|vLLM is not installed for this interpreter")
"""The one kind of issue a correct snippet may raise: it uses an extra that this venv lacks."""


def _blocks(page: Path) -> Iterator[tuple[int, str, str, str]]:
    """(line, language, marker, text) of each fenced block; the marker is the line before it."""
    lines = page.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        end = i + 1
        while not re.match(r"^ *```\s*$", lines[end]):
            end += 1
        indent = len(opening["indent"])
        before = lines[i - 1].strip() if i else ""
        body = "\n".join(line[indent:] for line in lines[i + 1 : end])
        yield i + 1, opening["lang"], before if before in MARKERS else "", body
        i = end + 1


def _where(page: Path, line: int) -> str:
    return f"{page.relative_to(REPO)}:{line}"


TOML = [pytest.param(page, line, marker, text, id=_where(page, line))
        for page in PAGES for line, lang, marker, text in _blocks(page) if lang == "toml"]


def _commands() -> Iterator[Any]:
    for page in PAGES:
        for line, lang, _marker, text in _blocks(page):
            if lang in SHELL:
                for offset, command in enumerate(text.replace("\\\n", " ").splitlines(), start=1):  # joined continuations
                    words = shlex.split(command.removeprefix("$ "), comments=True) if "grpo-run" in command else []
                    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
                        words = words[1:]  # VAR=value grpo-run ...
                    if words[:1] == ["grpo-run"]:
                        yield pytest.param(words[1:], id=f"{_where(page, line + offset)} {command.strip()}")
        text = page.read_text(encoding="utf-8")
        for match in re.finditer(r"(?<!`)`(grpo-run [^`]+)`(?!`)", text):
            words = shlex.split(match[1])[1:]
            if len(words) > 1 or words[0].startswith("-"):  # not just a name: `grpo-run check` in prose
                line = text.count("\n", 0, match.start()) + 1
                yield pytest.param(words, id=f"{_where(page, line)} {match[1]}")


def _merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(base))
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping) and not (
            key in PLUGIN_TABLES and value.get("name", out[key].get("name")) != out[key].get("name")
        ):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _with_example(fragment: Mapping[str, Any]) -> dict[str, Any]:
    example = tomllib.loads((EXAMPLES / "arithmetic.toml").read_text())
    if "train" in fragment.get("data", {}):  # data sources instead of the example's task
        example.pop("task")
        example["train"]["local_eval_every"] = 0
    return _merge(example, fragment)


@pytest.mark.parametrize(("page", "line", "marker", "text"), TOML)
def test_toml_snippets_are_valid_configs(page, line, marker, text, plugin_host, monkeypatch) -> None:
    # The vllm engine checks that its interpreter exists; `make test` runs before `make setup-heavy`
    # has built the vLLM venv that the Makefile points GRPO_RUN_VLLM_PYTHON at.
    monkeypatch.setenv("GRPO_RUN_VLLM_PYTHON", sys.executable)
    # docs/environments.md's verifiers example names the test tree's tiny environment (its page says
    # to run it with PYTHONPATH=tests/support/vf_envs).
    monkeypatch.syspath_prepend(str(REPO / "tests" / "support" / "vf_envs"))
    data = tomllib.loads(text)
    if marker == "<!-- pyproject.toml -->":
        assert "grpo_run" in data["project"]["entry-points"]
        return
    where = _where(page, line)
    try:
        parse_config(data if marker != "<!-- fragment -->" else _with_example(data), plugin_host.registry, where)
    except ConfigError as err:
        wrong = [issue for issue in err.issues if not OPTIONAL_PACKAGE.search(issue.message)]
        if wrong:  # not just an extra this environment lacks (vLLM, DeepSpeed, Ray)
            hint = "" if marker else " (a part of a config? mark it with <!-- fragment --> on the line before the fence)"
            pytest.fail(f"{ConfigError(where, wrong)}{hint}")


@pytest.mark.parametrize("words", list(_commands()))
def test_commands_parse(words) -> None:
    parser = _parser()
    try:
        parser.parse_args(command_words(words))
    except SystemExit as stop:  # --help, --version print and exit 0; a usage error exits 2
        assert stop.code == 0, f"grpo-run {shlex.join(words)}: not a valid command line"


def test_the_checks_find_a_wrong_key_and_a_wrong_command(plugin_host) -> None:
    """The quickstart's old mistake is caught, and so is a misspelt sub-command."""
    with pytest.raises(ConfigError, match="data.train_files: unknown key"):
        parse_config(_with_example({"data": {"train_files": ["train.jsonl"]}}), plugin_host.registry, "x")
    with pytest.raises(SystemExit):
        _parser().parse_args(command_words(["chek", "x.toml"]) + ["--bogus"])
    assert len(TOML) >= 20 and len(list(_commands())) >= 30
