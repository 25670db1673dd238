"""A sweep from what the user gave -- the base config's tables, the variations, a directory -- to
the variants ready to run, every check done before anything loads: the varied keys
(:mod:`.variants`), each variant's config and what a sweep needs of them (:mod:`.configs`), the
model (as ``grpo-run check`` checks it), the directory (:func:`~.driver.plan_variants`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from grpo_run.core.errors import ConfigError, UserError
from grpo_run.core.loop.preflight import check_model
from grpo_run.core.plugins.registry import ComponentRegistry
from grpo_run.core.sweep.configs import VariantConfig, variant_configs
from grpo_run.core.sweep.driver import plan_variants
from grpo_run.core.sweep.manifest import SweepManifest
from grpo_run.core.sweep.variant_run import VariantRun
from grpo_run.core.sweep.variants import VARY_SOURCE, key_issues, variants_of

SWEEP_SUFFIX = "-sweep"


@attrs.frozen
class PreparedSweep:
    directory: Path
    configs: list[VariantConfig]
    runs: list[VariantRun]
    """The variants to run now (on resume, those that did not complete)."""
    manifest: SweepManifest


def prepare_sweep(data: Mapping[str, Any], vary: Mapping[str, Sequence[Any]] | None, registry: ComponentRegistry,
                  source: str, *, directory: Path | None, config_path: str | None, overrides: Sequence[str] = (),
                  resume: bool = False, overwrite: bool = False) -> PreparedSweep:
    """Check and lay out a sweep of ``data`` (the base config's tables, ``overrides`` applied)
    over ``vary``; on ``resume`` the sweep in ``directory`` (``vary``, when given, must be its own)."""
    manifest = None
    if resume:
        assert directory is not None
        manifest = SweepManifest.read(directory)
        if vary is not None and {k: list(v) for k, v in vary.items()} != manifest.vary:
            raise UserError(f"--resume {directory}: the sweep varies {_said(manifest.vary)}, not {_said(vary)}: "
                            "leave --vary out to continue it as it is")
        vary = manifest.vary
    if not vary:
        raise UserError("a sweep needs at least one --vary KEY=V1,V2[,...]")
    issues = key_issues(vary)
    if issues:
        raise ConfigError(VARY_SOURCE, issues)
    variants = variants_of(vary)
    configs = variant_configs(data, variants, registry, source)
    issues = check_model(configs[0].cfg, registry)
    if issues:
        raise ConfigError(source, issues)
    if directory is None:
        first = configs[0].cfg
        directory = Path(first.run.output_dir) / f"{first.run.name}{SWEEP_SUFFIX}"
    if manifest is None:
        manifest = SweepManifest.new(config_path, overrides, {k: list(v) for k, v in vary.items()}, variants)
    elif [e.name for e in manifest.variants] != [v.name for v in variants]:
        raise UserError(f"{directory}/sweep.json: its variants are not the ones its variations make (edited?)")
    runs = plan_variants(configs, directory, manifest, resume=resume, overwrite=overwrite)
    return PreparedSweep(directory, configs, runs, manifest)


def _said(vary: Mapping[str, Sequence[Any]]) -> str:
    return "; ".join(f"{k}={','.join(map(str, v))}" for k, v in vary.items())
