"""The documentation site builds with warnings as errors (broken links and anchors, pages missing
from the navigation, nav entries without a page), as `make docs` and CI build it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from support.paths import REPO

pytest.importorskip("material", reason="the docs site needs mkdocs-material (the dev extra)")


def test_mkdocs_build_strict(tmp_path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO, capture_output=True, text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for page in ("index.html", "quickstart/index.html", "concepts/index.html", "config/index.html",
                 "plugins/verifiers/index.html", "plugins/trackers/index.html"):
        assert (tmp_path / "site" / page).is_file(), page
    assert "push_to_hub" in (tmp_path / "site" / "config" / "index.html").read_text()
