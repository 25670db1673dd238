"""``grpo_run.sweep``: LoRA variants of one config trained at once, from Python.

    result = grpo_run.sweep("examples/arithmetic.toml", vary={"optim.lr": [1e-3, 3e-3], "run.seed": [1, 2]},
                            model={"lora": {"r": 8}})

The config, reward functions and keyword overrides are taken as :func:`grpo_run.train` takes
them, for every variant; ``vary`` maps a config key to its values, and the sweep trains the
product of the variations (the CLI's ``grpo-run sweep CONFIG --vary KEY=V1,V2``; docs/lora.md).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from grpo_run.api.training import ConfigSource, outside_event_loop, prepared_data


@attrs.frozen
class SweepVariant:
    """Where one variant of a sweep ended."""

    name: str
    overrides: dict[str, Any]
    """Its values of the varied keys."""
    run_dir: Path
    """Its run directory (``config.toml``, ``metrics.jsonl``, ``log.jsonl``, checkpoints), as a run's."""
    status: str
    """``"completed"``, ``"failed"`` or ``"interrupted"``."""
    reason: str | None
    """Why it did not complete (one line)."""
    metrics: dict[str, float]
    """The newest value of every metric it logged in this call."""
    checkpoint: Path | None
    """Its newest checkpoint."""


@attrs.frozen
class SweepResult:
    """What :func:`sweep` returns."""

    sweep_dir: Path
    """The sweep's directory: ``sweep.json`` and a run directory per variant."""
    variants: list[SweepVariant]
    """Every variant of the sweep (those a resumed sweep found completed too)."""
    interrupted: str | None = None
    """The stop signal that ended the sweep (``None``: it ran to its end)."""


def sweep(
    config: ConfigSource,
    vary: Mapping[str, Sequence[Any]] | None = None,
    reward_funcs: Any = None,
    reward_weights: Sequence[float] | None = None,
    *,
    output_dir: str | os.PathLike[str] | None = None,
    resume: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    **overrides: Any,
) -> SweepResult:
    """Train every combination of ``vary``'s values as its own LoRA adapter on one base model.

    :param vary: ``{"optim.lr": [1e-3, 3e-3], "run.seed": [1, 2]}``: a config key and its values,
        one variant each; several keys make their product. Keys the variants must share (the
        model, the engine, the placement) are refused in one line.
    :param output_dir: the sweep's directory (default ``<run.output_dir>/<run.name>-sweep``).
    :param resume: a sweep's directory: continue every variant of it that did not complete
        (``vary`` may be left out).
    :param overwrite: start again in a directory that holds an earlier sweep.

    The config needs ``[model.lora]``. A variant that fails stops alone (its status and reason
    in the result and in ``sweep.json``). Errors in the config or the variations are raised
    (:class:`~grpo_run.UserError`) before anything loads.
    """
    from grpo_run.core.config.toml_writer import toml_value
    from grpo_run.core.sweep.driver import run_sweep
    from grpo_run.core.sweep.setup import prepare_sweep

    data, source, host = prepared_data(config, reward_funcs, reward_weights, overrides)
    directory = Path(resume) if resume is not None else (Path(output_dir) if output_dir is not None else None)
    config_path = str(Path(config).resolve()) if isinstance(config, (str, os.PathLike)) else None
    flat = [f"{key}={toml_value(value)}" for key, value in _flatten(overrides)]
    prepared = prepare_sweep(data, {k: list(v) for k, v in vary.items()} if vary is not None else None,
                             host.registry, source, directory=directory, config_path=config_path,
                             overrides=flat, resume=resume is not None, overwrite=overwrite)
    outcome = outside_event_loop(lambda: run_sweep(prepared.configs, prepared.runs, host, prepared.directory,
                                                   prepared.manifest))
    ran = {v.name: v for v in outcome.variants}
    variants = []
    for entry in prepared.manifest.variants:
        done = ran.get(entry.name)
        run_dir = prepared.directory / entry.run_dir
        variants.append(SweepVariant(
            entry.name, dict(entry.overrides), run_dir, entry.status, entry.reason,
            dict(done.metrics) if done is not None else {}, done.checkpoint if done is not None else _newest(run_dir)))
    return SweepResult(prepared.directory, variants, outcome.interrupted)


def _flatten(tables: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """Keyword overrides (``train={"total_steps": 3}``) as ``(dotted key, value)`` pairs, for sweep.json."""
    out: list[tuple[str, Any]] = []
    for key, value in tables.items():
        if isinstance(value, Mapping):
            out += _flatten(value, f"{prefix}{key}.")
        elif value is not None:
            out.append((f"{prefix}{key}", value))
    return out


def _newest(run_dir: Path) -> Path | None:
    from grpo_run.core.errors import UserError
    from grpo_run.core.loop.checkpoint import find_checkpoint

    try:
        return find_checkpoint(run_dir)
    except UserError:
        return None
