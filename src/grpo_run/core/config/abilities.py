"""Optional abilities of component ``Config`` classes that involve the whole run's configuration:
filling defaults from it (:class:`TakesRunDefaults`) and rules across sections
(:class:`ChecksRunConfig`). The other abilities are :mod:`grpo_run.core.plugins.abilities`;
these live with the config, which they take.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

from grpo_run.core.config.schema import RunConfig
from grpo_run.core.errors import ConfigIssue


@runtime_checkable
class TakesRunDefaults(Protocol):
    """A component ``Config`` with options whose default is a setting of the run (a reward model's
    ``dtype = "auto"``: the run's ``model.dtype``).

    ``with_run`` is called once the whole config is structured, before the rules
    (:class:`ChecksRunConfig`) are checked, and returns the config to use instead (an
    ``attrs.evolve`` of itself with those options filled in). The run's saved ``config.toml`` then
    shows the values used. Outside a run (``grpo-run score``, ``grpo_run.score``) it is not called.
    """

    def with_run(self, run: RunConfig) -> Any: ...


@runtime_checkable
class ChecksRunConfig(Protocol):
    """A component ``Config`` with rules that involve the rest of the run's configuration.

    Rules about a component's own options belong in attrs validators of its ``Config``. A rule
    that involves other sections (a loss that needs centered advantages, a sampler that needs the
    zero-std filter) is ``check_run``: called once the whole config is structured, with it; each
    returned :class:`~grpo_run.ConfigIssue` is reported like any other config error (its ``path``
    is a full key path such as ``"algorithm.filter_zero_std_samples"``).
    """

    def check_run(self, run: RunConfig) -> Iterable[ConfigIssue]: ...
