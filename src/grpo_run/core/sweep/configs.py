"""A sweep's variants as run configs: the base config with each variant's values, validated as
any run's config is, then what a sweep asks of them all -- LoRA adapters synced to an engine
that serves several at once, in one process -- before anything loads."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from grpo_run.core.config.formatting import join_path
from grpo_run.core.config.loading import parse_config
from grpo_run.core.config.lora_sync import SYNC_KEY, adapter_slots, choose_lora_sync
from grpo_run.core.config.schema import RunConfig
from grpo_run.core.config.toml_writer import toml_value
from grpo_run.core.errors import ConfigError, ConfigIssue
from grpo_run.core.plugins.abilities import ServesAdapters, TakesAdapters
from grpo_run.core.plugins.adapters import AdapterSlots
from grpo_run.core.plugins.families import ENGINE
from grpo_run.core.plugins.registry import ComponentRegistry
from grpo_run.core.sweep.variants import VARY_SOURCE, Variant


@attrs.frozen
class VariantConfig:
    variant: Variant
    cfg: RunConfig


def variant_configs(data: Mapping[str, Any], variants: Sequence[Variant], registry: ComponentRegistry,
                    source: str, set_aside: list[ConfigIssue] | None = None) -> list[VariantConfig]:
    """Each variant's validated config (``data``: the base config's tables, ``--set`` applied);
    every problem of every variant at once (one that all share, once), then the sweep's own
    (:func:`sweep_issues`), as one :class:`ConfigError` from ``source``. ``set_aside``: where
    issues about this machine go instead (``grpo-run plan`` plans for another)."""
    out: list[VariantConfig] = []
    issues: list[ConfigIssue] = []
    for variant in variants:
        merged, problems = with_values(data, variant.overrides)
        if problems:
            issues += problems
            continue
        try:
            out.append(VariantConfig(variant, parse_config(merged, registry, source, set_aside=set_aside)))
        except ConfigError as err:
            issues += [_blame(issue, variant) for issue in err.issues]
    issues = list(dict.fromkeys(issues))
    if not issues:
        issues = sweep_issues([v.cfg for v in out], registry)
    if issues:
        raise ConfigError(source, issues)
    return out


def with_values(data: Mapping[str, Any], overrides: Sequence[tuple[str, Any]]) -> tuple[dict[str, Any], list[ConfigIssue]]:
    """A copy of ``data`` with each ``(dotted key, value)`` set (missing tables made), and the
    keys that could not be set."""
    out = copy.deepcopy(dict(data))
    issues = []
    for key, value in overrides:
        parts = key.split(".")
        node = out
        for depth, part in enumerate(parts[:-1], start=1):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                issues.append(ConfigIssue(key, f"cannot be set: {join_path(parts[:depth])} is not a table "
                                               f"(from {VARY_SOURCE} {key})"))
                break
            node = child
        else:
            node[parts[-1]] = copy.deepcopy(value)
    return out, issues


def _blame(issue: ConfigIssue, variant: Variant) -> ConfigIssue:
    for key, value in variant.overrides:
        if issue.path == key or issue.path.startswith((key + ".", key + "[")) or key.startswith(issue.path + "."):
            return ConfigIssue(issue.path, f"{issue.message} (from {VARY_SOURCE} {key}={toml_value(value)})")
    return issue


def sweep_issues(configs: Sequence[RunConfig], registry: ComponentRegistry) -> list[ConfigIssue]:
    """What a sweep needs of its variants' configs: LoRA, synced as adapters to an engine that
    serves several at once, one learner in this process. The variants differ only where they may
    (:mod:`.variants`), so the first one speaks for the shared keys."""
    first = configs[0]
    issues = []
    if first.model.lora is None:
        issues.append(ConfigIssue("model.lora", "a sweep trains one LoRA adapter per variant on one base model: "
                                                "add a [model.lora] table"))
    if first.distributed.backend != "local":
        issues.append(ConfigIssue("distributed.backend", f"is {first.distributed.backend!r}: a sweep holds its "
                                  "variants' adapters in one learner process beside one engine (\"local\"); "
                                  "docs/lora.md says how to spread variants over machines"))
    if first.learner.strategy != "single" or first.learner.num_learners != 1:
        issues.append(ConfigIssue("learner.strategy", f"is {first.learner.strategy!r} with {first.learner.num_learners} "
                                  "learner(s): a sweep's variants take turns on one learner holding the base model "
                                  "(\"single\")"))
    if issues:
        return issues
    name = first.engine.name
    engine = registry.get(ENGINE, name)
    if not isinstance(engine, TakesAdapters) or not isinstance(engine, ServesAdapters):
        return [ConfigIssue("engine.name", f"the {name} engine cannot serve several LoRA adapters at once "
                                           "(it lacks the TakesAdapters and ServesAdapters abilities)")]
    for cfg in configs:
        sync = choose_lora_sync(cfg, registry)
        if sync is not None and sync.mode != "adapter":
            why = sync.refusal or 'sync = "merged"'
            issues.append(ConfigIssue(SYNC_KEY, f"a sweep syncs each variant's adapter to the shared engine, "
                                                f"and here it cannot: {why}"))
    if issues:
        return list(dict.fromkeys(issues))
    slots = sweep_slots(configs, registry)
    try:
        refused = engine.refuses_adapters(first.engine.config, slots)
    except Exception as exc:  # plugin code: name it, do not crash
        refused = f"its refuses_adapters raised {type(exc).__name__}: {exc}"
    if refused is not None:
        return [ConfigIssue("engine", f"the {name} engine cannot serve {slots.count} adapters at once: {refused}")]
    return []


def sweep_slots(configs: Sequence[RunConfig], registry: ComponentRegistry) -> AdapterSlots:
    """The shared engine's adapter slots: one per variant, the largest rank, every module any
    variant adapts (``None``: every linear layer)."""
    each = [adapter_slots(cfg, registry) for cfg in configs]
    slots = [s for s in each if s is not None]
    assert slots, "sweep_issues refuses a sweep whose variants sync no adapter"
    targets: set[str] | None = set()
    for s in slots:
        if s.target_modules is None or targets is None:
            targets = None
        else:
            targets |= set(s.target_modules)
    return AdapterSlots(max_rank=max(s.max_rank for s in slots), count=len(configs),
                        target_modules=tuple(sorted(targets)) if targets is not None else None)
