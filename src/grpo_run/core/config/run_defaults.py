"""Component options whose default is a setting of the run (:class:`~grpo_run.TakesRunDefaults`):
filled in once the whole config is structured, before the rules are checked."""

from __future__ import annotations

from typing import Any

import attrs

from grpo_run.core.config.abilities import TakesRunDefaults
from grpo_run.core.config.schema import RunConfig
from grpo_run.core.errors import ConfigIssue
from grpo_run.core.plugins.families import FAMILIES


def apply_run_defaults(cfg: RunConfig) -> tuple[RunConfig, list[ConfigIssue]]:
    """``cfg`` with each component config that takes run defaults replaced by its ``with_run(cfg)``;
    a ``with_run`` that raises is an issue naming the component (its config is kept as it was)."""
    issues: list[ConfigIssue] = []

    def resolved(where: str, config: Any) -> Any:
        if not isinstance(config, TakesRunDefaults):
            return config
        try:
            return config.with_run(cfg)
        except Exception as exc:  # plugin code: name it, do not crash
            issues.append(ConfigIssue(where, f"filling in its defaults from the run raised {type(exc).__name__}: {exc}"))
            return config

    changes: dict[str, Any] = {}
    for fam in FAMILIES:
        value = getattr(cfg, fam.slot) if fam.slot is not None else None
        if value is None:
            continue
        if fam.many:
            table = {name: resolved(f"{fam.slot}.{name}", conf) for name, conf in value.items()}
            if any(table[name] is not conf for name, conf in value.items()):
                changes[fam.slot] = table
        else:
            config = resolved(fam.slot, value.config)
            if config is not value.config:
                changes[fam.slot] = attrs.evolve(value, config=config)
    return (attrs.evolve(cfg, **changes) if changes else cfg), issues
