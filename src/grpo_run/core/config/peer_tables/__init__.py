"""Where other frameworks' config keys live in grpo-run: Open Instruct, ROLL, TRL and verl.

One table, :data:`PEERS`, keyed by tails of peer key paths (``learning_rate``,
``generating_args.temperature``, ``rollout.n``); :func:`lookup` finds the entry for a whole path,
the longest matching tail first. Unknown-key errors show an entry's :attr:`Peer.hint`;
``grpo-run import`` moves values with it.
"""

from __future__ import annotations

from collections.abc import Sequence

from grpo_run.core.config.peer_tables.entry import OMIT, NoEquivalentValue, Peer
from grpo_run.core.config.peer_tables.open_instruct import OPEN_INSTRUCT
from grpo_run.core.config.peer_tables.roll import ROLL
from grpo_run.core.config.peer_tables.shared import SHARED, merged
from grpo_run.core.config.peer_tables.trl import TRL
from grpo_run.core.config.peer_tables.verl import PPO_NAMES, VERL

PEERS: dict[str, Peer] = merged(SHARED, OPEN_INSTRUCT, PPO_NAMES, VERL, ROLL, TRL)
"""Every framework's entries; a name two frameworks share has one meaning (else the merge fails)."""


def lookup(path: Sequence[str]) -> Peer | None:
    """The entry of the longest tail of ``path`` that :data:`PEERS` knows, or None."""
    parts = [str(p) for p in path]
    for start in range(len(parts)):
        entry = PEERS.get(".".join(parts[start:]))
        if entry is not None:
            return entry
    return None


__all__ = ["OMIT", "PEERS", "NoEquivalentValue", "Peer", "lookup"]
