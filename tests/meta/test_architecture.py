"""The layering rules of DESIGN.md, checked on the source: plugins import only ``grpo_run``; the
core never imports the built-in plugins or the CLI; the public API is importable and complete."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import grpo_run

SRC = Path(grpo_run.__file__).resolve().parent


def imported_modules(path: Path, root: Path, tree: ast.Module | None = None) -> list[tuple[int, str]]:
    """(line, module) of every import in a file under ``root`` (the folder holding the
    ``grpo_run`` package), relative imports resolved against its package (``tree``: the file's,
    when already parsed)."""
    if tree is None:
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
    from grpo_run.core.config import abilities as config_abilities
    from grpo_run.core.plugins import abilities

    protocols = [n for module in (abilities, config_abilities) for n, v in vars(module).items()
                 if isinstance(v, type) and getattr(v, "_is_protocol", False) and v.__module__ == module.__name__]
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
    # Only the Ray and DeepSpeed adapters need an extra.
    assert all(m.rsplit(".", 1)[1].startswith(("ray_", "deepspeed")) for m in missing_extras), missing_extras


def test_importing_grpo_run_stays_light() -> None:
    # Plugins, the pytest plugin and worker processes import grpo_run: no torch (or numpy) there.
    import subprocess
    import sys

    code = "import sys, grpo_run; print(sorted(m for m in ('torch', 'numpy', 'transformers') if m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"


def import_graph(package: Path = SRC, inside: str = "grpo_run.core") -> dict[str, set[str]]:
    """module -> the modules under ``inside`` it imports, deferred imports (inside functions)
    included and ``if TYPE_CHECKING:`` blocks left out; a package's ``__init__`` is not a target."""
    modules = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        if not name.startswith(inside):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                node.body = []
        found = {module for _, module in imported_modules(path, package.parent, tree)}
        targets = set()
        for module in found:
            while module and module not in modules:
                module = module.rpartition(".")[0]
            if module and module != name and module.startswith(inside) and modules[module].name != "__init__.py":
                targets.add(module)
        graph[name] = targets
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circle_in_the_core_not_even_through_a_deferred_import() -> None:
    assert circles(import_graph()) == []


def test_the_cores_rooms_depend_one_way() -> None:
    # Rooms are core's sub-packages (and its top-level modules): a room importing one that imports
    # it back, through any files, ties both into one.
    def room(module: str) -> str:
        return ".".join(module.split(".")[:3])

    rooms: dict[str, set[str]] = {}
    for module, targets in import_graph().items():
        rooms.setdefault(room(module), set()).update(room(t) for t in targets if room(t) != room(module))
    assert circles(rooms) == []


def test_the_circle_check_sees_a_circle_closed_by_a_deferred_import(tmp_path: Path) -> None:
    core = tmp_path / "grpo_run" / "core"
    core.mkdir(parents=True)
    (core / "__init__.py").write_text("", encoding="utf-8")
    (core / "a.py").write_text("from grpo_run.core.b import B\nA = 1\n", encoding="utf-8")
    (core / "b.py").write_text("B = 2\n\ndef f():\n    from grpo_run.core.a import A\n    return A\n", encoding="utf-8")
    (core / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from grpo_run.core.a import A\n",
                               encoding="utf-8")
    assert circles(import_graph(tmp_path / "grpo_run")) == [["grpo_run.core.a", "grpo_run.core.b"]]
