"""The ``mixture`` sampler: rows from several data sources in fixed proportions."""

from __future__ import annotations

import difflib
import math
import zlib
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import attrs

from grpo_run import ConfigIssue, RunConfig
from grpo_run.plugins.samplers.common import ShuffledEpochs


def _check_weights(_inst: Any, _attr: attrs.Attribute, weights: Mapping[str, float]) -> None:
    if not weights:
        raise ValueError("'weights' must name at least one data source")
    bad = [
        f"{k!r} = {w!r}" for k, w in weights.items() if not (isinstance(w, (int, float)) and math.isfinite(w) and w > 0)
    ]
    if bad:
        raise ValueError(f"'weights' must be positive finite numbers; got {', '.join(bad)}")


def _did_you_mean(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


@attrs.frozen
class MixtureSamplerConfig:
    """Options of the ``mixture`` sampler."""

    weights: dict[str, float] = attrs.field(converter=dict, validator=_check_weights)
    """Data source -> relative weight (positive; normalised to sum to 1). Every source present in
    the rows must be listed, and every listed source must have rows."""
    source_key: str = "dataset"
    """Row key naming a row's data source (the data loader sets it to the file stem or task name)."""
    shuffle: bool = True
    """Reshuffle each source's rows at the start of each of its epochs."""

    def check_run(self, run: RunConfig) -> list[ConfigIssue]:
        """With ``data.train`` sources the source names are known before any row is read: every
        weighted name must be one and every source must have a weight."""
        if run.task is not None or not run.data.train or self.source_key != "dataset":
            return []
        labels = sorted({source.label for source in run.data.train})
        unknown = sorted(set(self.weights) - set(labels))
        unweighted = sorted(set(labels) - set(self.weights))
        issues = [
            ConfigIssue(f"sampler.weights.{name}", f"no data.train source is named {name!r}"
                        f"{_did_you_mean(name, labels)}; sources: {', '.join(labels)} (a source's name is its "
                        "'name', else its file stem or hub id)")
            for name in unknown
        ]
        if unweighted:
            issues.append(ConfigIssue("sampler.weights", f"gives no weight to data.train sources "
                                      f"{', '.join(unweighted)}; give each a weight"))
        return issues


class MixtureSampler:
    """Interleaves data sources so each contributes in proportion to its weight.

    Source choice is a deterministic smooth weighted round-robin: draw ``n + 1`` goes to the
    source with the largest deficit ``(n + 1) * p_s - drawn_s`` (ties: source name order), so
    after any number of draws every source is within one row of its share -- batches have the
    configured mix without sampling noise. Within a source, rows come in shuffled epochs as in
    ``uniform`` (every row once per epoch, an order fixed by ``seed`` and the source name). A
    small source therefore repeats more often than a large one.

    Rows of a source missing from ``weights`` are a construction error naming the sources (a
    silently dropped source is how a mixture goes wrong unnoticed; leave it out of the data to
    drop it). Sampler state (per-source draw counts and epoch positions) is plain ints, so a
    resumed run draws the same rows as an uninterrupted one.
    """

    name: ClassVar[str] = "mixture"
    Config: ClassVar[type] = MixtureSamplerConfig

    def __init__(self, config: MixtureSamplerConfig, rows: Sequence[Mapping[str, Any]], seed: int) -> None:
        if not rows:
            raise ValueError("the mixture sampler needs at least one row")
        self.config = config
        self.rows = rows
        by_source = self._group_rows(rows)
        self.sources = sorted(config.weights)
        total = sum(config.weights.values())
        self.probs = {s: config.weights[s] / total for s in self.sources}
        self.members = {s: by_source[s] for s in self.sources}
        self.cursors = {
            s: ShuffledEpochs(len(self.members[s]), seed * 1_000_003 + zlib.crc32(s.encode()), config.shuffle)
            for s in self.sources
        }
        self.counts = dict.fromkeys(self.sources, 0)

    def _group_rows(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, list[int]]:
        key = self.config.source_key
        by_source: dict[str, list[int]] = {}
        missing: list[str] = []
        for i, row in enumerate(rows):
            if key not in row:
                missing.append(str(row.get("id", f"#{i}")))
                continue
            by_source.setdefault(str(row[key]), []).append(i)
        if missing:
            shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            raise ValueError(f"mixture sampler: {len(missing)} rows have no {key!r} key (rows {shown})")
        unlisted = sorted(set(by_source) - set(self.config.weights))
        if unlisted:
            raise ValueError(
                f"mixture sampler: rows come from data sources missing from 'weights': {', '.join(unlisted)}; "
                f"give each a weight (sources in the data: {', '.join(sorted(by_source))})"
            )
        empty = sorted(set(self.config.weights) - set(by_source))
        if empty:
            raise ValueError(
                f"mixture sampler: 'weights' names data sources with no rows: {', '.join(empty)} "
                f"(sources in the data: {', '.join(sorted(by_source))})"
            )
        return by_source

    def _next_source(self) -> str:
        step = sum(self.counts.values()) + 1
        deficits = [(step * self.probs[s] - self.counts[s], -rank) for rank, s in enumerate(self.sources)]
        return self.sources[-max(deficits)[1]]

    def sample(self, n: int) -> list[Mapping[str, Any]]:
        """Return the next ``n`` rows."""
        out = []
        for _ in range(n):
            source = self._next_source()
            self.counts[source] += 1
            out.append(self.rows[self.members[source][self.cursors[source].next()]])
        return out

    def state_dict(self) -> dict[str, Any]:
        return {s: {"drawn": self.counts[s], **self.cursors[s].state_dict()} for s in self.sources}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if sorted(state) != self.sources:
            raise ValueError(
                f"mixture sampler state is for sources {', '.join(sorted(state))}, "
                f"but this run mixes {', '.join(self.sources)}"
            )
        for s in self.sources:
            self.cursors[s].load_state_dict(state[s])
            self.counts[s] = int(state[s]["drawn"])
