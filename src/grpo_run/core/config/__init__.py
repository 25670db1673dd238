"""The run configuration: TOML -> :class:`RunConfig`, with every error reported at once.

* :func:`load_config` reads a file and applies ``--set`` overrides; :func:`parse_config`
  structures data that is already parsed; both check the invariants of :data:`INVARIANTS`.
* :class:`ConfigError` lists each problem as ``<file>: <key.path>: <message>``.
* :func:`dump_config_toml` writes the effective config back (it round-trips).
"""

from grpo_run.core.config.converter import make_converter
from grpo_run.core.config.dumping import config_to_dict, dump_config_toml
from grpo_run.core.config.invariants import INVARIANTS, check_invariants
from grpo_run.core.config.loading import apply_overrides, load_config, parse_config
from grpo_run.core.config.schema import EngineSlot, KLSlot, PluginSlot, RunConfig
from grpo_run.core.errors import ConfigError, ConfigIssue

__all__ = [
    "INVARIANTS",
    "ConfigError",
    "ConfigIssue",
    "EngineSlot",
    "KLSlot",
    "PluginSlot",
    "RunConfig",
    "apply_overrides",
    "check_invariants",
    "config_to_dict",
    "dump_config_toml",
    "load_config",
    "make_converter",
    "parse_config",
]
