"""Micro-batches: the one place the token budget per forward is applied.

A mini-batch's sequences are dealt to micro-batches of at most ``max_tokens`` tokens
(:func:`micro_batch_bins`), whole prompt groups together, and each is packed into rows of its own
(:func:`pack_mini_batch`). A mini-batch is one optimizer step; its forward and backward may run in several pieces of whole
rows whose gradients add up. The loss needs no rescaling for that: the normaliser's per-token
weights (:mod:`.aggregation`) are fixed over the whole rollout batch before any forward, and a
sequence never spans two rows, so the sum of the micro-batches' weighted losses *is* the
mini-batch's loss, in every aggregation mode.

The no-grad passes (pi_old, reference) run under their own budget over the same micro-batches,
neighbours merged while they fit (:func:`micro_groups`), and their ``[R, L]`` results are
assembled per mini-batch, so a training micro-batch can take its rows of them whatever the two
budgets are.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import torch

from grpo_run.core.learner.layout import SequenceLayout
from grpo_run.core.learner.logprobs import batch_layout
from grpo_run.core.learner.strategies.base import Strategy
from grpo_run.core.learner.strategies.sharding import idle_batch
from grpo_run.core.rollout.packing import PackedBatch, SequenceToPack, pack_sequences, token_balanced_groups


def pack_mini_batch(
    seqs: Sequence[SequenceToPack], pack_length: int, pad_token_id: int, max_tokens: int
) -> PackedBatch:
    """``seqs`` (one rank's share of a mini-batch) packed in micro-batches of at most
    ``max_tokens`` tokens (:func:`micro_batch_bins`); all in one forward when they fit or
    ``max_tokens = 0``; an idle batch when there are none (a rank without a share)."""
    if not seqs:
        return idle_batch(pad_token_id)
    if max_tokens <= 0 or sum(len(s) for s in seqs) <= max_tokens:
        return pack_sequences(seqs, pack_length, pad_token_id)
    return pack_sequences(seqs, pack_length, pad_token_id, groups=micro_batch_bins(seqs, max_tokens))


def micro_batch_bins(seqs: Sequence[SequenceToPack], max_tokens: int) -> list[list[int]]:
    """Indices of ``seqs`` per micro-batch: the fewest token-balanced bins (LPT) of at most
    ``max_tokens`` tokens (a sequence longer than that: a bin of its own), dealing whole groups of
    sequences with the same prompt, so the learner still computes a shared prompt once; a group
    larger than ``max_tokens`` is cut into pieces first."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, s in enumerate(seqs):
        groups.setdefault(tuple(s.prompt_ids), []).append(i)
    items: list[list[int]] = []
    for members in groups.values():
        piece: list[int] = []
        for i in members:
            if piece and sum(len(seqs[j]) for j in piece) + len(seqs[i]) > max_tokens:
                items.append(piece)
                piece = []
            piece.append(i)
        items.append(piece)
    sizes = [sum(len(seqs[i]) for i in item) for item in items]
    count = max(1, -(-sum(sizes) // max_tokens))
    while True:
        bins = token_balanced_groups(sizes, count)
        if count >= len(items) or all(len(b) == 1 or sum(sizes[i] for i in b) <= max_tokens for b in bins):
            return [sorted(i for item in b for i in items[item]) for b in bins]
        count += 1


def micro_groups(batch: PackedBatch, max_tokens: int) -> list[list[int]]:
    """Row indices of each micro-batch of ``batch`` under ``max_tokens`` real tokens per forward.

    Where the batch was packed in micro-batches (:func:`pack_mini_batch`) that fit, those, with
    neighbours merged while they still fit (a larger budget, as the no-grad passes have);
    otherwise :func:`row_groups`. ``max_tokens = 0``: every row in one forward.
    """
    rows = list(range(batch.num_rows))
    if max_tokens <= 0 or not rows:
        return [rows] if rows else []
    tokens = batch.row_tokens()
    units = [list(g) for g in batch.micro_rows or ()]
    if not units or any(len(u) > 1 and sum(tokens[r] for r in u) > max_tokens for u in units):
        return row_groups(tokens, max_tokens)
    merged: list[list[int]] = []
    for unit in units:
        if merged and sum(tokens[r] for r in merged[-1] + unit) <= max_tokens:
            merged[-1] += unit
        else:
            merged.append(list(unit))
    return merged


def row_groups(row_tokens: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Row indices of each micro-batch: the fewest token-balanced groups (LPT) in which every group
    of more than one row holds at most ``max_tokens`` real tokens. ``max_tokens = 0``: one group.

    >>> row_groups([500, 500, 480, 120], 1024)
    [[0, 2], [1, 3]]
    """
    rows = len(row_tokens)
    if rows == 0:
        return []
    count = 1 if max_tokens <= 0 else min(rows, max(1, -(-sum(row_tokens) // max_tokens)))
    while True:
        groups = token_balanced_groups(row_tokens, count)
        fits = max_tokens <= 0 or all(len(g) == 1 or sum(row_tokens[i] for i in g) <= max_tokens for g in groups)
        if fits or count >= rows:
            return groups
        count += 1


def split_rows(batch: PackedBatch, groups: Sequence[Sequence[int]]) -> list[PackedBatch]:
    """``batch`` itself when one group holds every row in order, else one batch per group."""
    if len(groups) == 1 and list(groups[0]) == list(range(batch.num_rows)):
        return [batch]
    return [batch.select_rows(g) for g in groups]


def assemble_rows(
    batch: PackedBatch,
    groups: Sequence[Sequence[int]],
    parts: Sequence[PackedBatch],
    compute: Callable[[PackedBatch], torch.Tensor],
) -> torch.Tensor:
    """``compute`` (a ``[r, w]`` per-token tensor of a batch) over ``batch``'s row groups, put back
    together as the ``[R, L]`` tensor of the whole batch (0 beyond each part's width)."""
    if len(parts) == 1 and parts[0] is batch:
        return compute(batch)
    out = torch.zeros(batch.input_ids.shape, dtype=torch.float32, device=batch.input_ids.device)
    for rows, part in zip(groups, parts):
        values = compute(part)
        out[torch.tensor(list(rows), dtype=torch.long, device=out.device), : values.shape[1]] = values
    return out


def take_rows(values: torch.Tensor | None, rows: Sequence[int], part: PackedBatch) -> torch.Tensor | None:
    """The ``[r, w]`` share of a mini-batch's ``[R, L]`` ``values`` that lines up with ``part``
    (``None`` for a padding micro-batch, which has no rows of it)."""
    if values is None or not rows:
        return None
    if values.shape == part.input_ids.shape and list(rows) == list(range(values.shape[0])):
        return values
    index = torch.tensor(list(rows), dtype=torch.long, device=values.device)
    return values.index_select(0, index)[:, : part.row_length]


@attrs.frozen(eq=False)
class MicroBatch:
    """A micro-batch: ``rows`` of its mini-batch (empty for a padding micro-batch, which matches
    another rank's count), the packed rows and their sequence layout."""

    rows: tuple[int, ...]
    batch: PackedBatch
    layout: SequenceLayout


class MicroBatches:
    """One learner step's micro-batches, by mini-batch and budget; a piece over the same rows is
    built once (the policy, old and reference forwards of one budget share it)."""

    def __init__(self, strategy: Strategy, pad_token_id: int, share_prompts: bool) -> None:
        self.strategy = strategy
        self.pad_token_id = pad_token_id
        self.share_prompts = share_prompts
        self._pieces: dict[tuple[int, tuple[int, ...]], MicroBatch] = {}
        self._layouts: dict[int, SequenceLayout] = {}
        self._padding: MicroBatch | None = None

    def split(self, index: int, batch: PackedBatch, max_tokens: int) -> list[MicroBatch]:
        """The micro-batches of mini-batch ``index`` under ``max_tokens``, as many as on the rank
        that needs the most (padding ones after the real ones)."""
        groups = micro_groups(batch, max_tokens)
        count = self.strategy.max_over_ranks(len(groups))
        missing = [key for key in ((index, tuple(g)) for g in groups) if key not in self._pieces]
        for key, part in zip(missing, split_rows(batch, [list(rows) for _, rows in missing])):
            self._pieces[key] = MicroBatch(key[1], part, self.layout_of(part))
        out = [self._pieces[(index, tuple(g))] for g in groups]
        if len(out) < count:
            out += [self._padding_piece(batch.input_ids.device)] * (count - len(out))
        return out

    def _padding_piece(self, device: torch.device) -> MicroBatch:
        """The step's one padding micro-batch (an idle batch: no loss, no gradient)."""
        if self._padding is None:
            pad = idle_batch(self.pad_token_id).to(device)
            self._padding = MicroBatch((), pad, self.layout_of(pad))
        return self._padding

    def layout_of(self, batch: PackedBatch) -> SequenceLayout:
        """The layout of ``batch``, one of this step's pieces (kept alive here, so its id is its own)."""
        if id(batch) not in self._layouts:
            self._layouts[id(batch)] = batch_layout(batch, share_prompts=self.share_prompts)
        return self._layouts[id(batch)]


_SUMMED = ("loss/policy", "loss/total", "loss/kl")
"""Each micro-batch's value is its share of the mini-batch's loss: they add up."""


class MicroMetrics:
    """A mini-batch's metrics from its micro-batches': losses add up, everything else (loss
    diagnostics, entropy) is a mean weighted by loss tokens -- the mini-batch's own value for
    per-token means. Values and token counts may be tensors: they are read (a device sync) once,
    in :meth:`result`, not after every micro-batch."""

    def __init__(self) -> None:
        self.sums: dict[str, Any] = {}
        self.weights: dict[str, Any] = {}
        self.plain: dict[str, list[Any]] = {}

    def add(self, values: Mapping[str, Any], tokens: Any) -> None:
        for key, value in values.items():
            if key in _SUMMED:
                self.sums[key] = self.sums.get(key, 0.0) + value
                continue
            self.plain.setdefault(key, []).append(value)
            self.sums[key] = self.sums.get(key, 0.0) + value * tokens
            self.weights[key] = self.weights.get(key, 0.0) + tokens

    def result(self) -> dict[str, float]:
        out = {k: float(v) for k, v in self.sums.items() if k in _SUMMED}
        for key, values in self.plain.items():
            weight = float(self.weights[key])
            out[key] = float(self.sums[key]) / weight if weight else float(sum(values)) / len(values)
        return out
