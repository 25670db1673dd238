"""The product speaks of grpo-run, not of how it was made: docs, scripts, examples and code state
facts ("not yet measured on a GPU", "measured on a 2-core CPU, 2026-11-28"), never who had which
machine, which tool moved which file, or which ticket a change came from."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECKED = ("README.md", "Makefile", "docs", "scripts", "src", "bench", "examples", ".ci")
WORKPLACE = re.compile("|".join((
    r"\b(?:other|six|several|two|three) sessions\b", r"\bsessions'",
    r"\b(?:issue|wave|stop) \d+\b", r"\bwave-\d\b",
    r"\bthis machine's \d+ cores\b", r"\bdevice (?:tool|machine)\b", r"`carry`", r"\b(?:was|were|is|be) lent\b",
    r"\bsub-?agents?\b", r"\bhelper sessions?\b", r"\btool library\b", r"\bfarm-(?:studio|bench)\b",
    r"\bno GPU (?:was|has been|is) (?:lent|drawn)\b",
)), re.IGNORECASE)


def workplace_words(text: str) -> list[str]:
    return [m.group(0) for m in WORKPLACE.finditer(text)]


def tracked_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--", *CHECKED], cwd=ROOT, capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / name for name in out.stdout.decode().split("\0") if name]


def test_docs_scripts_and_code_speak_of_grpo_run_not_of_how_it_was_made() -> None:
    found = []
    for path in tracked_files():
        if path.suffix in {".png", ".gguf", ".safetensors", ".bin", ".whl"} or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            found += [f"{path.relative_to(ROOT)}:{number}: {word!r}" for word in workplace_words(line)]
    assert found == [], "\n".join(found)


@pytest.mark.parametrize("line", [
    "An earlier round (a machine shared by six sessions, load 8-23)",
    "the device tool's `carry` takes it",
    "one client managed 40 requests/s on this machine's 2 cores",
    "reads the whole text (issue 31)",
    'the learner of wave 3',
])
def test_the_check_sees_workplace_words(line: str) -> None:
    assert workplace_words(line)


def test_the_check_leaves_product_facts_alone() -> None:
    assert workplace_words("measured on a 2-core CPU, 2026-11-28; not yet measured on a GPU; silently; "
                           "equivalent; a chat session; each sandbox") == []
