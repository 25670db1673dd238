"""Exceptions that mean "the user must fix something": the CLI prints them without a traceback."""

from __future__ import annotations


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
