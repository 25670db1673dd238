"""Build grpo-run's sdist, then its wheel from that sdist (as ``python -m build`` does), and check
that the wheel carries every file of the package tracked in git: the modules and the package data
(the embedded model, the plugin templates, the live page). The build uses the running
interpreter's setuptools, without build isolation, so it downloads nothing.

    python scripts/check_dist.py [--out dist]     # exit 1, naming the files, when any is missing
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE_ROOT = "src/"
# Files the wheel must carry, beside every tracked module: checked by name so that a broken
# git listing cannot make the check pass on an empty set.
MUST_HAVE = (
    "grpo_run/plugins/models/checkpoints/tiny-arithmetic/model.safetensors",
    "grpo_run/cli/plugin_templates/loss.py.tmpl",
    "grpo_run/cli/dashboard.html",
)


def build(kind: str, source: Path, out: Path) -> Path:
    """``build_sdist`` or ``build_wheel`` of setuptools' PEP 517 backend, run in ``source``."""
    code = f"from setuptools import build_meta as b; print(b.build_{kind}({str(out)!r}))"
    result = subprocess.run([sys.executable, "-c", code], cwd=source, check=True, capture_output=True, text=True)
    return out / result.stdout.strip().splitlines()[-1]


def tracked(*paths: str) -> list[str]:
    listing = subprocess.run(["git", "ls-files", *paths], cwd=REPO, check=True, capture_output=True, text=True)
    return listing.stdout.splitlines()


def clean_copy(dest: Path) -> Path:
    """The tracked files only, as a fresh clone has them: a stale ``*.egg-info`` in the checkout
    would otherwise feed its old file list into the sdist."""
    for name in tracked():
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if (REPO / name).is_file():
            shutil.copy2(REPO / name, target)
    return dest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "dist", help="where the sdist and wheel go")
    out = parser.parse_args().out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        sdist = build("sdist", clean_copy(Path(tmp) / "checkout"), out)
        with tarfile.open(sdist) as tar:
            tar.extractall(Path(tmp) / "sdist", filter="data")
        (unpacked,) = (Path(tmp) / "sdist").iterdir()
        wheel = build("wheel", unpacked, out)
    with zipfile.ZipFile(wheel) as zf:
        carried = set(zf.namelist())
    expected = {name[len(PACKAGE_ROOT):] for name in tracked("src/grpo_run")}
    missing = sorted((expected | set(MUST_HAVE)) - carried)
    if missing:
        print(f"error: {wheel.name} (built from {sdist.name}) lacks {len(missing)} package file(s): "
              + ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else ""), file=sys.stderr)
        return 1
    size = wheel.stat().st_size / 2**20
    print(f"{sdist.name} and {wheel.name} ({size:.1f} MiB): all {len(expected)} tracked package files carried")
    return 0


if __name__ == "__main__":
    sys.exit(main())
