"""Installing a one-module plugin package as pip would, without pip: the module and its
``.dist-info`` (``METADATA``, ``entry_points.txt`` naming it in the ``grpo_run`` group) under a
folder that goes on ``sys.path`` or ``PYTHONPATH``, where importlib.metadata finds it."""

from __future__ import annotations

from pathlib import Path


def install_module(root: Path, module: str, source: str, distribution: str, entry: str) -> Path:
    """``source`` as the module ``module`` of the distribution ``distribution`` (version 0.1),
    registered as the plugin ``entry``; returns ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{module}.py").write_text(source, encoding="utf-8")
    info = root / f"{distribution.replace('-', '_')}-0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[grpo_run]\n{entry} = {module}\n")
    return root
