"""Where things are, for tests in any folder."""

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
EXAMPLES = REPO / "examples"
DOCS = REPO / "docs"
