"""Which verifier calls a batch of rows makes, and how those calls are grouped for the workers."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from grpo_run.core.scoring.policy import VerifierPolicy
from grpo_run.core.scoring.workers import VerifierCall


def plan_row(
    row: Mapping[str, Any],
    default_verifier: str | None,
    enabled: Collection[str],
    all_rows: Sequence[str],
    errors: list[str],
    row_verifiers: bool = True,
) -> list[tuple[str, Any]]:
    """(verifier, ground truth) pairs for ``row``: the ``enabled`` verifiers it names (its
    ``verifier``, else ``default_verifier``), then the ``all_rows`` verifiers it did not name,
    which get the row's ``ground_truth`` as it is (``None`` when it has none); problems with the
    row go to ``errors``. ``row_verifiers=False``: the row's ``verifier`` is not read, only the
    ``all_rows`` verifiers score it."""
    names = row.get("verifier", default_verifier) if row_verifiers else None
    gold = row.get("ground_truth")
    if names is None and (all_rows or not row_verifiers):
        pairs: list[tuple[str, Any]] = []
    elif isinstance(names, str):
        pairs = [(names, gold)]
    elif isinstance(names, (list, tuple)) and all(isinstance(n, str) for n in names):
        if not (isinstance(gold, (list, tuple)) and len(gold) == len(names)):
            errors.append(f"verifier lists {len(names)} names, so ground_truth must be a list of {len(names)}")
            pairs = []
        else:
            pairs = list(zip(names, gold, strict=True))
    else:
        errors.append(f"verifier must be a name or a list of names, got {names!r}")
        pairs = []
    if len({name for name, _ in pairs}) != len(pairs):
        errors.append(f"verifier names a verifier twice: {names!r}")
        pairs = []
    for name, _ in pairs:
        if name not in enabled:
            errors.append(f"verifier {name!r} is not enabled; enabled: {', '.join(enabled)}")
    named = {name for name, _ in pairs}
    return [(n, g) for n, g in pairs if n in enabled] + [(n, gold) for n in all_rows if n not in named]


def interleave_rows(calls: Sequence[VerifierCall], indices: Sequence[int]) -> list[int]:
    """``indices`` in turns: each verifier's first call on each row, then its second on each row,
    and so on (a batch holds the G samples of each prompt one after another). A hung verifier then
    times out on different rows first, and the timeout guard stops it after about
    ``max_consecutive_timeouts`` calls rather than ``2G + 1``; results do not depend on the order."""
    seen: dict[Any, int] = {}
    turn = []
    for i in indices:
        key = (calls[i].verifier, calls[i].row.get("id", id(calls[i].row)))
        turn.append(seen.get(key, 0))
        seen[key] = turn[-1] + 1
    return [i for _, i in sorted(zip(turn, indices), key=lambda pair: pair[0])]


def group_units(
    calls: Sequence[VerifierCall], indices: Sequence[int], spread: int, policies: Mapping[str, VerifierPolicy]
) -> list[list[int]]:
    """Group call indices into units: one per call, except batched verifiers' calls, which go in
    batches of at most ``max_batch_size`` (and, unless the verifier has a worker of its own, small
    enough to spread over ``spread`` workers). A batch sits where its first call was."""
    per_verifier: dict[str, int] = {}
    for i in indices:
        per_verifier[calls[i].verifier] = per_verifier.get(calls[i].verifier, 0) + 1
    units: list[list[int]] = []
    open_batch: dict[str, list[int]] = {}
    for i in indices:
        name = calls[i].verifier
        policy = policies[name]
        if not policy.batched:
            units.append([i])
            continue
        share = per_verifier[name] if policy.own_worker else math.ceil(per_verifier[name] / spread)
        cap = min(policy.max_batch_size, max(1, share))
        batch = open_batch.get(name)
        if batch is None or len(batch) >= cap:
            batch = open_batch[name] = []
            units.append(batch)
        batch.append(i)
    return units
