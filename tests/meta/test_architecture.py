"""The layering rules of DESIGN.md, checked on the source: plugins import only ``grpo_run``; the
core never imports the built-in plugins or the CLI; the public API is importable and complete."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import grpo_run

SRC = Path(grpo_run.__file__).resolve().parent


def imported_modules(path: Path, root: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in a file under ``root`` (the folder holding the
    ``grpo_run`` package), relative imports resolved against its package."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            found.append((node.lineno, module))
            found.extend((node.lineno, f"{module}.{alias.name}") for alias in node.names if module == "grpo_run")
    return found


def violations(folder: str, forbidden: tuple[str, ...], package: Path = SRC) -> list[str]:
    out = []
    for path in sorted((package / folder).rglob("*.py")):
        for line, module in imported_modules(path, package.parent):
            if module.startswith(forbidden):
                out.append(f"{path.relative_to(package.parent)}:{line} imports {module}")
    return out


def test_plugins_import_only_the_public_api() -> None:
    assert violations("plugins", ("grpo_run.core", "grpo_run.cli", "grpo_run.testing")) == []


def test_the_core_never_imports_plugins_or_the_cli() -> None:
    assert violations("core", ("grpo_run.plugins", "grpo_run.cli")) == []


def test_the_checker_sees_a_forbidden_import(tmp_path: Path) -> None:
    # The rule must be able to fail: plugin files importing the core, absolutely or relatively.
    plugins = tmp_path / "grpo_run" / "plugins" / "verifiers"
    plugins.mkdir(parents=True)
    (plugins / "a.py").write_text("import os\nfrom grpo_run.core.errors import RunError\n", encoding="utf-8")
    (plugins / "b.py").write_text("from ...core import errors\nfrom grpo_run import Verifier\n", encoding="utf-8")
    assert violations("plugins", ("grpo_run.core",), tmp_path / "grpo_run") == [
        "grpo_run/plugins/verifiers/a.py:2 imports grpo_run.core.errors",
        "grpo_run/plugins/verifiers/b.py:1 imports grpo_run.core",
    ]


@pytest.mark.parametrize("name", grpo_run.__all__)
def test_every_public_name_is_importable(name: str) -> None:
    assert getattr(grpo_run, name) is not None


def test_every_ability_is_public_and_documented() -> None:
    from grpo_run.core.plugins import abilities

    protocols = [n for n, v in vars(abilities).items() if isinstance(v, type) and getattr(v, "_is_protocol", False)
                 and v.__module__ == abilities.__name__]
    assert protocols, "no ability protocols found"
    doc = (SRC.parents[1] / "docs" / "plugins.md").read_text(encoding="utf-8")
    for name in protocols:
        assert name in grpo_run.__all__, f"{name} is not exported by grpo_run"
        assert f"`{name}`" in doc, f"{name} is not documented in docs/plugins.md"


OPTIONAL_EXTRAS = {"ray", "deepspeed", "vllm", "peft"}
"""Packages of optional extras: a core module that needs one may fail to import without it."""


def test_core_modules_import_on_their_own() -> None:
    # Each room's modules import without the CLI having run first (no hidden import order).
    missing_extras = []
    for path in sorted((SRC / "core").rglob("*.py")):
        module = ".".join(path.relative_to(SRC.parent).with_suffix("").parts)
        try:
            importlib.import_module(module.removesuffix(".__init__"))
        except ModuleNotFoundError as exc:
            if (exc.name or "").split(".")[0] not in OPTIONAL_EXTRAS:
                raise
            missing_extras.append(module)
    assert len(missing_extras) <= 3, missing_extras  # only the Ray/DeepSpeed adapters need an extra


def test_importing_grpo_run_stays_light() -> None:
    # Plugins, the pytest plugin and worker processes import grpo_run: no torch (or numpy) there.
    import subprocess
    import sys

    code = "import sys, grpo_run; print(sorted(m for m in ('torch', 'numpy', 'transformers') if m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"
