"""Exceptions that mean "the user must fix something": the CLI prints them without a traceback,
and what a config check reports (:class:`ConfigIssue`, :class:`ConfigError`). A leaf: every room
may import it."""

from __future__ import annotations

from collections.abc import Sequence

import attrs


class UserError(Exception):
    """A mistake in input the user controls (config, data, command line). Exit code 2."""

    exit_code = 2


class PluginError(UserError):
    """A plugin is broken or two plugins conflict."""


class PluginInterrupted(KeyboardInterrupt):
    """A ``KeyboardInterrupt`` (a Ctrl-C, or the plugin's own ``raise``) while a plugin was being
    imported or registered; the message names the plugin. The CLI exits 130 with it."""


class UnknownComponentError(UserError):
    """A config names a component that no plugin registered."""


class RunError(Exception):
    """A run stopped on purpose (e.g. too many verifier failures). Exit code 1."""

    exit_code = 1


@attrs.frozen
class ConfigIssue:
    """One problem in a config: where (a dotted key path, ``""`` for the whole file) and what."""

    path: str
    message: str
    about_machine: bool = attrs.field(default=False, kw_only=True)
    """The problem is this machine's, not the config's (a package not installed here): ``grpo-run
    plan`` for another machine sets it aside and says so."""


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
