"""Whether a Ray cluster's nodes can ever hold a run's actors: checked before waiting for them, so
an impossible placement fails at once, saying what it needs ("needs 3 nodes"), instead of after
``distributed.startup_timeout_s`` with the free resources of the moment.

Pure functions of ``ray.nodes()`` records (``NodeID``, ``Alive``, ``NodeManagerAddress``,
``Resources``: each node's totals, not what is free now: only what can never fit fails here).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Bundle = Mapping[str, float]


def _fits(bundle: Bundle, capacity: Mapping[str, float]) -> bool:
    return all(capacity.get(name, 0.0) >= amount for name, amount in bundle.items() if amount > 0)


def _spread(hosts: Sequence[Sequence[int]]) -> int:
    """How many bundles can sit on distinct nodes at once (a maximum bipartite matching)."""
    owner: dict[int, int] = {}

    def place(bundle: int, seen: set[int]) -> bool:
        for node in hosts[bundle]:
            if node in seen:
                continue
            seen.add(node)
            if node not in owner or place(owner[node], seen):
                owner[node] = bundle
                return True
        return False

    return sum(place(b, set()) for b in range(len(hosts)))


def describe_nodes(nodes: Sequence[Mapping[str, Any]]) -> str:
    """``2 nodes: 1a2b3c4d (10.0.0.1) CPU 8, GPU 1; ...`` (alive ones)."""
    alive = [n for n in nodes if n.get("Alive", True)]
    parts = []
    for node in alive:
        resources = node.get("Resources", {})
        shown = ", ".join(f"{k} {v:g}" for k, v in sorted(resources.items())
                          if not k.startswith(("node:", "memory", "object_store_memory", "accelerator_type")))
        parts.append(f"{str(node.get('NodeID', '?'))[:8]} ({node.get('NodeManagerAddress', '?')}) {shown}")
    return f"{len(alive)} node{'s' if len(alive) != 1 else ''}: " + "; ".join(parts)


def why_unplaceable(actors: Sequence[tuple[str, Bundle, int]], strategy: str | None,
                    nodes: Sequence[Mapping[str, Any]]) -> str | None:
    """Why ``actors`` (``(kind, bundle, count)``) can never be placed on ``nodes`` under
    ``strategy`` (a placement group's; None: each actor on its own), or None when they can."""
    capacities = [dict(n.get("Resources", {})) for n in nodes if n.get("Alive", True)]
    bundles = [(kind, dict(bundle)) for kind, bundle, count in actors for _ in range(count)]
    if not bundles:
        return None
    counts = ", ".join(f"{count} {kind}{'s' if count != 1 else ''}" for kind, _, count in actors if count)
    cluster = describe_nodes(nodes)
    for kind, bundle in bundles:
        if not any(_fits(bundle, cap) for cap in capacities):
            return (f"each {kind} actor asks for {bundle}, and no node of the cluster has that ({cluster}); change "
                    f"distributed.{kind}_resources or add a node that has it")
    hosts = [[i for i, cap in enumerate(capacities) if _fits(bundle, cap)] for _, bundle in bundles]
    if strategy == "STRICT_SPREAD" and _spread(hosts) < len(bundles):
        return (f'placement_strategy = "STRICT_SPREAD" needs {len(bundles)} nodes, one per actor ({counts}), and '
                f"at most {_spread(hosts)} can each hold one ({cluster}); add nodes, or use \"SPREAD\" or \"PACK\"")
    total: dict[str, float] = {}
    for _, bundle in bundles:
        for name, amount in bundle.items():
            total[name] = total.get(name, 0.0) + amount
    if strategy == "STRICT_PACK" and not any(_fits(total, cap) for cap in capacities):
        return (f'placement_strategy = "STRICT_PACK" needs one node with {total} for its {len(bundles)} actors '
                f"({counts}), and none has that ({cluster}); use \"PACK\" to allow several nodes")
    everything = {name: sum(cap.get(name, 0.0) for cap in capacities) for name in total}
    short = {name: amount for name, amount in total.items() if everything[name] < amount}
    if short:
        return (f"the {len(bundles)} actors ({counts}) need {total} together and the whole cluster has "
                f"{ {name: everything[name] for name in short} } of {', '.join(short)} ({cluster}); add nodes or "
                f"ask for less (distributed.*_resources)")
    return None
