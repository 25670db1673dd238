"""What a config check reports: :class:`ConfigIssue` (one problem, where and what) and
:class:`ConfigError` (every problem of one config). A leaf: every config module may import it."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from grpo_run.core.errors import UserError


@attrs.frozen
class ConfigIssue:
    """One problem in a config: where (a dotted key path, ``""`` for the whole file) and what."""

    path: str
    message: str


class ConfigError(UserError):
    """A config that cannot be used; ``issues`` lists every problem found, not just the first."""

    def __init__(self, source: str, issues: Sequence[ConfigIssue]) -> None:
        super().__init__(source, list(issues))
        self.source = source
        """Where the config came from: the file name, ``--set`` or ``<config>``."""
        self.issues: list[ConfigIssue] = list(issues)

    def __str__(self) -> str:
        return "\n".join(
            f"{self.source}: {issue.path}: {issue.message}" if issue.path else f"{self.source}: {issue.message}"
            for issue in self.issues
        )
