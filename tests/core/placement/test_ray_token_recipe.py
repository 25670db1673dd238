"""The head-node recipe of docs/scale-out.md leaves the cluster's token readable by its owner only
(``heavy``: runs Ray's own CLI): ``ray get-auth-token --generate`` writes ``~/.ray/auth_token``
readable by every local user, and the recipe's next line takes that away."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import DOCS

pytestmark = [pytest.mark.heavy]
pytest.importorskip("ray")


def head_node_token_lines() -> list[str]:
    text = (DOCS / "scale-out.md").read_text()
    block = next(b for b in re.findall(r"```bash\n(.*?)```", text, re.S) if "ray get-auth-token --generate" in b)
    lines = [line.split("#")[0].strip() for line in block.splitlines()]
    start = lines.index("ray get-auth-token --generate")
    return [line for line in lines[start:] if line.startswith(("ray get-auth-token", "chmod"))][:2]


def test_the_recipe_leaves_the_token_file_to_its_owner(tmp_path) -> None:
    lines = head_node_token_lines()
    assert lines == ["ray get-auth-token --generate", "chmod 600 ~/.ray/auth_token"]
    env = {**os.environ, "HOME": str(tmp_path), "RAY_AUTH_MODE": "token",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    token = tmp_path / ".ray" / "auth_token"
    subprocess.run(["bash", "-c", f"umask 022; {lines[0]}"], env=env, check=True, capture_output=True, timeout=120)
    assert stat.S_IMODE(token.stat().st_mode) & 0o044  # what Ray leaves: others can read it
    subprocess.run(["bash", "-c", lines[1]], env=env, check=True, timeout=30)
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
