"""``grpo_run.score``: the training scorer on rows you already have (reward debugging)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from grpo_run.api.reward_functions import (
    as_reward_functions,
    register_reward_functions,
    split_reward_models,
    verifier_tables,
)
from grpo_run.api.training import outside_event_loop
from grpo_run.core.config.converter import make_converter, structure_components
from grpo_run.core.config.formatting import issues_from_exception
from grpo_run.core.config.schema import ScoringSection
from grpo_run.core.errors import ConfigError, UserError
from grpo_run.core.plugins.families import VERIFIER
from grpo_run.core.plugins.host import build_plugin_host


def score(
    rows: Iterable[Mapping[str, Any]],
    verifiers: Mapping[str, Mapping[str, Any]] | None = None,
    reward_funcs: Any = None,
    reward_weights: Sequence[float] | None = None,
    *,
    scoring: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Score each row's ``completion``; returns the rows with ``reward``, ``scores`` (verifier ->
    its own score) and, where a verifier failed, ``error``.

    :param rows: mappings with ``completion``, and ``ground_truth`` and ``verifier`` for the
        verifiers that check answers (as in ``grpo-run score``).
    :param verifiers: ``name -> options`` (the ``[verifiers.<name>]`` tables); default: every
        verifier the rows name, with its default options. ``{}`` with ``reward_funcs``: the
        functions alone score, the rows' ``verifier`` is plain data (as in :func:`grpo_run.train`).
    :param reward_funcs: plain reward functions (as for :func:`grpo_run.train`); they score every
        row. A string is a reward model's hub id or directory (the ``reward_model`` verifier).
    :param scoring: ``[scoring]`` options (``num_workers``, ``timeout_s``, ...); by default the
        calls run in this process (``num_workers = 0``) with no time limit enforced.
    """
    from grpo_run.core.scoring.scorer import RewardScorer  # the scoring runtime loads on use

    rows = [dict(r) for r in rows]
    for i, row in enumerate(rows):
        if not isinstance(row.get("completion"), str):
            raise UserError(f"row {i}: needs a 'completion' string")
    reward_funcs, reward_weights, models = split_reward_models(reward_funcs, reward_weights)
    funcs = as_reward_functions(reward_funcs or [], reward_weights)
    registry = build_plugin_host().registry
    register_reward_functions(registry, funcs)
    tables: dict[str, Any] = dict(verifiers) if verifiers is not None else {
        name: {} for row in rows for name in _named(row)}
    tables.update({**verifier_tables(funcs), **models})
    if not tables:
        raise UserError("no verifier: pass verifiers={...} or reward_funcs=[...], or name one in the rows")
    converter = make_converter(registry)
    try:
        configs = structure_components(converter, registry, VERIFIER, tables)
        options = dict(scoring or {"num_workers": 0})
        if (funcs or models) and verifiers is not None and not verifiers:  # as in train: the functions alone
            options.setdefault("row_verifiers", False)
        section = converter.structure(options, ScoringSection)
    except Exception as exc:  # cattrs groups: report each problem with its key
        raise ConfigError("<score>", issues_from_exception(exc)) from None
    scorer = RewardScorer.from_config(section, {n: (registry.get(VERIFIER, n), c) for n, c in configs.items()},
                                      max_error_rate=1.0, max_logged_errors=0)
    batch = [{**row, "id": row.get("id", f"row-{i}")} for i, row in enumerate(rows)]

    async def run() -> Any:
        try:
            return await scorer.score(batch, [row["completion"] for row in batch])
        finally:
            await scorer.aclose()

    results = outside_event_loop(lambda: asyncio.run(run()))
    out = []
    for row, result in zip(rows, results, strict=True):
        scored = {**row, "reward": result.reward, "scores": dict(result.scores)}
        if result.error is not None:
            scored["error"] = result.error
        out.append(scored)
    return out


def _named(row: Mapping[str, Any]) -> list[str]:
    names = row.get("verifier")
    if names is None:
        return []
    return [names] if isinstance(names, str) else list(names)
