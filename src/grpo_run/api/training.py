"""``grpo_run.train`` and ``grpo_run.load_config``: a run from Python (a notebook, a script).

A config is a TOML path, a dict shaped like the TOML, or a :class:`~grpo_run.RunConfig`. Keyword
overrides are tables merged into it section by section (``train={"total_steps": 5}``; ``None``
removes a key, ``task=None`` drops the task). The merged config is validated exactly as the CLI
does. Errors are raised (:class:`~grpo_run.UserError` and its kin), not printed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import attrs

from grpo_run.api.reward_functions import (
    as_reward_functions,
    register_reward_functions,
    split_reward_models,
    verifier_tables,
)
from grpo_run.core.config import config_to_dict, parse_config
from grpo_run.core.config.loading import read_toml
from grpo_run.core.config.schema import RunConfig
from grpo_run.core.errors import UserError
from grpo_run.core.plugins.host import PluginHost, build_plugin_host

ConfigSource = str | os.PathLike[str] | Mapping[str, Any] | RunConfig
T = TypeVar("T")


@attrs.frozen
class TrainResult:
    """What :func:`train` returns."""

    run_dir: Path
    """The run directory: ``config.toml``, ``metrics.jsonl``, ``log.jsonl``, checkpoints."""
    metrics: dict[str, float]
    """The newest value of every metric logged (``eval/accuracy``, ``reward/mean``, ...)."""
    checkpoint: Path | None
    """The newest checkpoint written (Hugging Face format), or None when none was saved."""
    config: RunConfig
    """The validated config the run used."""


def load_config(config: ConfigSource, reward_funcs: Any = None, reward_weights: Sequence[float] | None = None,
                **overrides: Any) -> RunConfig:
    """Validate a config (path, dict or :class:`RunConfig`) with ``overrides`` merged in."""
    return _prepare(config, reward_funcs, reward_weights, overrides)[0]


def train(
    config: ConfigSource,
    reward_funcs: Any = None,
    reward_weights: Sequence[float] | None = None,
    *,
    output_dir: str | os.PathLike[str] | None = None,
    resume: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    **overrides: Any,
) -> TrainResult:
    """Train; returns the run directory, the final metrics and the last checkpoint.

    :param reward_funcs: plain reward functions (see :mod:`grpo_run.api.reward_functions`):
        callables, :class:`~grpo_run.RewardFunction` objects, or a ``name -> callable`` dict. Each
        becomes a verifier named after it that scores every row, added to the config's own. A
        string (or path) in the list is a reward model's hub id or directory, as in TRL: the
        ``reward_model`` verifier with that ``model``.
    :param reward_weights: one weight per function (TRL's ``reward_weights``); default 1.
    :param output_dir: the run directory (default ``<run.output_dir>/<run.name>``).
    :param resume: a checkpoint, checkpoints directory or run directory to continue from.
    :param overwrite: start again in a run directory that holds an earlier run (removes its
        files; as ``--overwrite``). Without it such a directory is a :class:`~grpo_run.UserError`.

    Inside a running event loop (a Jupyter cell) the run goes to a helper thread, since the
    training loop runs its own.
    """
    from grpo_run.core.loop.checkpoint import find_checkpoint
    from grpo_run.core.loop.rundir import checkpoints_dir, default_run_dir, run_dir_of_checkpoint
    from grpo_run.core.loop.run import train as run_training

    cfg, host = _prepare(config, reward_funcs, reward_weights, overrides)
    resumed_run = run_dir_of_checkpoint(find_checkpoint(resume)) if resume is not None else None
    run_dir = Path(output_dir) if output_dir is not None else resumed_run or default_run_dir(cfg)
    metrics = outside_event_loop(lambda: run_training(cfg, host, run_dir, resume_from=resume,
                                                                 overwrite=overwrite))
    try:
        checkpoint: Path | None = find_checkpoint(checkpoints_dir(cfg, run_dir))
    except UserError:
        checkpoint = None
    return TrainResult(run_dir=run_dir, metrics=dict(metrics), checkpoint=checkpoint, config=cfg)


def _prepare(config: ConfigSource, reward_funcs: Any, reward_weights: Sequence[float] | None,
             overrides: Mapping[str, Any]) -> tuple[RunConfig, PluginHost]:
    data, source, host = prepared_data(config, reward_funcs, reward_weights, overrides)
    return parse_config(data, host.registry, source), host


def prepared_data(config: ConfigSource, reward_funcs: Any, reward_weights: Sequence[float] | None,
                  overrides: Mapping[str, Any]) -> tuple[dict[str, Any], str, PluginHost]:
    """(the config's tables with ``overrides`` and the reward functions' verifiers merged in, its
    name in error messages, the plugin host the functions are registered with)."""
    reward_funcs, reward_weights, models = split_reward_models(reward_funcs, reward_weights)
    funcs = as_reward_functions(reward_funcs or [], reward_weights)
    host = build_plugin_host()
    register_reward_functions(host.registry, funcs)
    data, source = config_data(config)
    if isinstance(config, (str, os.PathLike)):  # a `module:Class` name may live next to the config
        host.registry.import_dirs.append(Path(config).resolve().parent)
    data = merge_tables(data, overrides)
    if funcs or models:
        tables = {**verifier_tables(funcs), **models}
        clash = sorted(set(tables) & set(data.get("verifiers") or {}))
        if clash:
            what = ("a reward model in reward_funcs: drop one of the two" if clash[0] in models
                    else "the name of a reward function; rename one (grpo_run.RewardFunction(fn, name=...))")
            raise UserError(f"{source}: [verifiers.{clash[0]}] is also {what}")
        if not data.get("verifiers"):  # as in TRL, the functions alone give the reward
            data["scoring"] = {"row_verifiers": False, **(data.get("scoring") or {})}
        data["verifiers"] = {**(data.get("verifiers") or {}), **tables}
    return data, source, host


def config_data(config: ConfigSource) -> tuple[dict[str, Any], str]:
    """(TOML-shaped data, its name in error messages) of any config source."""
    if isinstance(config, RunConfig):
        return config_to_dict(config), "<RunConfig>"
    if isinstance(config, Mapping):
        return copy.deepcopy(dict(config)), "<dict>"
    if isinstance(config, (str, os.PathLike)):
        return read_toml(Path(config)), os.fspath(config)
    raise UserError(f"config must be a TOML path, a dict or a grpo_run.RunConfig, got {type(config).__name__}")


def merge_tables(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``over`` merged in, table by table; ``None`` in ``over`` deletes the key."""
    out = copy.deepcopy(dict(base))
    for key, value in over.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge_tables(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def outside_event_loop(fn: Callable[[], T]) -> T:
    """Call ``fn`` here, or in a helper thread when this thread runs an event loop (Jupyter)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        in_loop = False
    else:
        in_loop = True
    if not in_loop:
        return fn()
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="grpo-run") as pool:
        return pool.submit(fn).result()
