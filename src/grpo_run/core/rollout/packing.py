"""Pack prompt+completion sequences into learner rows (first-fit decreasing).

Every sequence keeps its own ``position_ids`` (restarting at 0) and its own ``seq_ids`` value, so
the learner can stop sequences attending to each other (see :mod:`grpo_run.core.learner.logprobs`).

Alignment convention, shared with :func:`grpo_run.core.learner.logprobs.packed_token_logprobs`: the value
at position ``t`` of a per-token tensor belongs to the token ``input_ids[t]`` -- for log-probs, it is
``log p(input_ids[t] | earlier tokens of the same sequence)``, computed from the logits at ``t - 1``.
So completion token ``k`` of a sequence sits at ``start + len(prompt_ids) + k`` in its row, and
``completion_mask``, ``advantages`` and ``engine_logprobs`` are set at exactly those positions.

Positions outside ``completion_mask`` (prompt, padding, an episode's environment tokens) hold 0 in
``advantages`` and ``engine_logprobs``: the NaN log-probs an episode gives tokens the engine did
not sample never enter a packed row. A NaN *on* a loss token (environment tokens trained with
``environment.train_on_env_tokens``) stays NaN, and the learner refuses to read it as an engine
log-prob (:func:`grpo_run.core.learner.offpolicy.sampled_engine_logprobs`).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import attrs
import torch


@attrs.frozen
class SequenceToPack:
    """One prompt+completion sequence headed for the learner."""

    prompt_ids: list[int]
    """Prompt token ids; at least one (the first completion token needs a token to predict it from)."""
    completion_ids: list[int]
    """Generated token ids."""
    advantage: float
    """Group-relative advantage, applied to every completion token."""
    engine_logprobs: list[float]
    """Generation engine's log-prob of each completion token (``len == len(completion_ids)``)."""
    seq_id: int
    """Caller's identifier of the sequence (kept in :attr:`PackedBatch.source_seq_ids`)."""
    loss_mask: bool = True
    """Whether the completion tokens count in the loss (False: packed, but masked out)."""
    token_mask: tuple[bool, ...] | None = None
    """Per completion token, whether it counts in the loss (``None``: all do). An episode's
    environment messages and the template scaffolding around them are false: the engine did not
    sample them, and their ``engine_logprobs`` are NaN."""
    token_advantages: tuple[float, ...] | None = None
    """Per completion token, its advantage (``None``: ``advantage`` for all): an episode's
    per-turn advantages (``environment.advantage_granularity = "turn"``)."""

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.completion_ids)

    def token_loss_mask(self) -> tuple[bool, ...]:
        """Whether each completion token counts in the loss (``loss_mask`` and ``token_mask``)."""
        if not self.loss_mask:
            return (False,) * len(self.completion_ids)
        return self.token_mask if self.token_mask is not None else (True,) * len(self.completion_ids)


@attrs.frozen(eq=False)
class PackedBatch:
    """Packed learner rows. Every tensor is ``[R, L]``: R rows, L = the longest row's length.

    L is the longest *used* row, not ``pack_length``, so no row carries padding beyond what the
    packing itself leaves; padding sits at the end of each row.
    """

    input_ids: torch.Tensor
    """long ``[R, L]``; ``pad_token_id`` on padding."""
    position_ids: torch.Tensor
    """long ``[R, L]``; restarts at 0 at every sequence start, 0 on padding."""
    seq_ids: torch.Tensor
    """long ``[R, L]``; batch-local sequence index ``0..num_seqs-1`` (input order), -1 on padding."""
    completion_mask: torch.Tensor
    """bool ``[R, L]``; true where a completion token sits whose log-prob counts in the loss."""
    advantages: torch.Tensor
    """float32 ``[R, L]``; the sequence's advantage where ``completion_mask``, else 0."""
    engine_logprobs: torch.Tensor
    """float32 ``[R, L]``; engine log-prob of the token where ``completion_mask``, else 0."""
    num_seqs: int
    """Number of sequences packed."""
    num_real_tokens: int
    """Non-padding tokens in the rows."""
    source_seq_ids: tuple[int, ...]
    """``SequenceToPack.seq_id`` of each batch-local sequence index."""
    spans: tuple[tuple[int, int, int], ...]
    """``(row, start, end)`` of each batch-local sequence (``end`` exclusive)."""
    micro_rows: tuple[tuple[int, ...], ...] | None = None
    """Packed in groups (``groups`` of :func:`pack_sequences`): the consecutive rows of each group."""

    @property
    def num_rows(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def row_length(self) -> int:
        return int(self.input_ids.shape[1])

    @property
    def packed_ratio(self) -> float:
        """Packing efficiency: real tokens / (R * L); 0.0 for an empty batch."""
        capacity = self.num_rows * self.row_length
        return self.num_real_tokens / capacity if capacity else 0.0

    def row_tokens(self) -> list[int]:
        """Real (non-padding) tokens of each row."""
        counts = [0] * self.num_rows
        for row, start, end in self.spans:
            counts[row] += end - start
        return counts

    def select_rows(self, rows: Sequence[int]) -> PackedBatch:
        """The batch of just ``rows`` (in that order), as :func:`pack_sequences` would lay them out:
        sequences renumbered ``0..n-1`` in their original order, rows as wide as the widest one."""
        rows = list(rows)
        new_row = {r: i for i, r in enumerate(rows)}
        kept = [i for i, (row, _, _) in enumerate(self.spans) if row in new_row]
        renumber = torch.full((self.num_seqs + 1,), -1, dtype=torch.long)  # index -1 (padding) -> -1
        renumber[torch.tensor(kept, dtype=torch.long)] = torch.arange(len(kept))
        width = max((self.spans[i][2] for i in kept), default=0)
        index = torch.tensor(rows, dtype=torch.long, device=self.input_ids.device)

        def take(t: torch.Tensor) -> torch.Tensor:
            return t.index_select(0, index)[:, :width]

        seq_ids = take(self.seq_ids)
        return PackedBatch(
            input_ids=take(self.input_ids),
            position_ids=take(self.position_ids),
            seq_ids=renumber.to(seq_ids.device)[seq_ids],
            completion_mask=take(self.completion_mask),
            advantages=take(self.advantages),
            engine_logprobs=take(self.engine_logprobs),
            num_seqs=len(kept),
            num_real_tokens=sum(self.spans[i][2] - self.spans[i][1] for i in kept),
            source_seq_ids=tuple(self.source_seq_ids[i] for i in kept),
            spans=tuple((new_row[self.spans[i][0]], self.spans[i][1], self.spans[i][2]) for i in kept),
        )

    def to(self, device: torch.device | str) -> PackedBatch:
        """A copy with every tensor moved to ``device``."""
        return attrs.evolve(
            self,
            **{
                f.name: getattr(self, f.name).to(device)
                for f in attrs.fields(PackedBatch)
                if isinstance(getattr(self, f.name), torch.Tensor)
            },
        )


def first_fit_decreasing(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """Assign items to bins of ``capacity`` by first-fit decreasing.

    Returns, per bin, the indices of the items it holds in placement order (longest first; ties
    keep input order, so the result is deterministic).
    """
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    bins: list[list[int]] = []
    free: list[int] = []
    for i in order:
        n = lengths[i]
        for b, room in enumerate(free):
            if n <= room:
                bins[b].append(i)
                free[b] -= n
                break
        else:
            bins.append([i])
            free.append(capacity - n)
    return bins


def _check(seqs: Sequence[SequenceToPack], pack_length: int) -> None:
    if pack_length < 1:
        raise ValueError(f"pack_length must be >= 1, got {pack_length}")
    for s in seqs:
        if not s.prompt_ids:
            raise ValueError(f"sequence {s.seq_id} has no prompt token")
        if len(s.engine_logprobs) != len(s.completion_ids):
            raise ValueError(
                f"sequence {s.seq_id} has {len(s.completion_ids)} completion tokens but "
                f"{len(s.engine_logprobs)} engine log-probs"
            )
        if s.token_mask is not None and len(s.token_mask) != len(s.completion_ids):
            raise ValueError(
                f"sequence {s.seq_id} has {len(s.completion_ids)} completion tokens but a token mask of "
                f"{len(s.token_mask)}"
            )
        if s.token_advantages is not None and len(s.token_advantages) != len(s.completion_ids):
            raise ValueError(
                f"sequence {s.seq_id} has {len(s.completion_ids)} completion tokens but "
                f"{len(s.token_advantages)} token advantages"
            )
        if len(s) > pack_length:
            raise ValueError(
                f"sequence {s.seq_id} has {len(s)} tokens ({len(s.prompt_ids)} prompt + "
                f"{len(s.completion_ids)} completion), more than pack_length={pack_length}"
            )


def assign_rows(lengths: Sequence[int], pack_length: int, *, minimize_width: bool = True) -> list[list[int]]:
    """Rows of item indices: first-fit decreasing into ``pack_length``, then optionally tightened.

    Every row of a batch is as long as the longest one, so with ``minimize_width`` the capacity is
    lowered (binary search) to the smallest one for which FFD still needs no more rows than at
    ``pack_length``: the padding of the last row is spread thin instead of costing a whole row
    (e.g. 128 sequences, 4660 tokens, ``pack_length`` 512: 10 rows of 469 instead of 10 rows of
    up to 512, efficiency 0.91 -> 0.99).
    """
    rows = first_fit_decreasing(lengths, pack_length)
    if not minimize_width or len(rows) < 2:
        return rows

    def width(candidate: list[list[int]]) -> int:
        return max(sum(lengths[i] for i in row) for row in candidate)

    best, best_width = rows, width(rows)
    lo, hi = max(max(lengths), -(-sum(lengths) // len(rows))), best_width - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        candidate = first_fit_decreasing(lengths, mid)
        if len(candidate) <= len(rows):
            if width(candidate) < best_width:  # FFD is not strictly monotone in capacity: keep the best
                best, best_width = candidate, width(candidate)
            hi = mid - 1
        else:
            lo = mid + 1
    return best


def pack_sequences(
    seqs: Sequence[SequenceToPack],
    pack_length: int,
    pad_token_id: int,
    *,
    minimize_width: bool = True,
    groups: Sequence[Sequence[int]] | None = None,
) -> PackedBatch:
    """Pack ``seqs`` into rows of at most ``pack_length`` tokens, first-fit decreasing by length.

    The number of rows is FFD's at ``pack_length``; with ``minimize_width`` the rows are then made
    as short as possible for that number of rows (see :func:`assign_rows`). A sequence longer than
    ``pack_length`` (or with no prompt token, or a log-prob count that does not match its
    completion) is a :class:`ValueError` naming its ``seq_id``.

    ``groups`` (indices into ``seqs``, each sequence in one): each group is packed into rows of
    its own, consecutive; :attr:`PackedBatch.micro_rows` says which rows hold each group (the
    learner's micro-batches, :mod:`grpo_run.core.learner.micro`).
    """
    _check(seqs, pack_length)
    lengths = [len(s) for s in seqs]
    if groups is None:
        return _assemble(seqs, assign_rows(lengths, pack_length, minimize_width=minimize_width), pad_token_id)
    rows: list[list[int]] = []
    micro: list[tuple[int, ...]] = []
    for members in groups:
        group_rows = assign_rows([lengths[i] for i in members], pack_length, minimize_width=minimize_width)
        micro.append(tuple(range(len(rows), len(rows) + len(group_rows))))
        rows += [[members[j] for j in row] for row in group_rows]
    return attrs.evolve(_assemble(seqs, rows, pad_token_id), micro_rows=tuple(micro))


def _assemble(seqs: Sequence[SequenceToPack], rows: list[list[int]], pad_token_id: int) -> PackedBatch:
    """The packed tensors of ``seqs`` laid out in ``rows`` (sequence indices per row)."""
    width = max((sum(len(seqs[i]) for i in row) for row in rows), default=0)

    # Build plain lists row by row and convert once: far cheaper than many small tensor writes.
    ids, pos, sid, cmask, adv, elp = [], [], [], [], [], []
    spans: list[tuple[int, int, int]] = [(0, 0, 0)] * len(seqs)
    for r, row in enumerate(rows):
        ids_r: list[int] = []
        pos_r: list[int] = []
        sid_r: list[int] = []
        cmask_r: list[bool] = []
        adv_r: list[float] = []
        elp_r: list[float] = []
        for i in row:
            s = seqs[i]
            n, p, c = len(s), len(s.prompt_ids), len(s.completion_ids)
            spans[i] = (r, len(ids_r), len(ids_r) + n)
            ids_r += s.prompt_ids
            ids_r += s.completion_ids
            pos_r += range(n)
            sid_r += [i] * n
            # Completion token k lands at start + p + k; its log-prob comes from the logits at the
            # position before it, so the prompt's last token predicts the first completion token.
            if s.token_mask is None and s.token_advantages is None:
                cmask_r += [False] * p + [s.loss_mask] * c
                adv_r += [0.0] * p + [s.advantage if s.loss_mask else 0.0] * c
                elp_r += [0.0] * p + (list(s.engine_logprobs) if s.loss_mask else [0.0] * c)
            else:  # an episode: tokens the engine did not sample stay out (their NaN log-probs too)
                keep = s.token_loss_mask()
                cmask_r += [False] * p + list(keep)
                per_token = s.token_advantages or (s.advantage,) * c
                adv_r += [0.0] * p + [a if k else 0.0 for a, k in zip(per_token, keep)]
                elp_r += [0.0] * p + [lp if k else 0.0 for lp, k in zip(s.engine_logprobs, keep)]
        pad = width - len(ids_r)
        ids.append(ids_r + [pad_token_id] * pad)
        pos.append(pos_r + [0] * pad)
        sid.append(sid_r + [-1] * pad)
        cmask.append(cmask_r + [False] * pad)
        adv.append(adv_r + [0.0] * pad)
        elp.append(elp_r + [0.0] * pad)

    shape = (len(rows), width)  # explicit, so an empty batch is [0, 0]
    return PackedBatch(
        input_ids=torch.tensor(ids, dtype=torch.long).reshape(shape),
        position_ids=torch.tensor(pos, dtype=torch.long).reshape(shape),
        seq_ids=torch.tensor(sid, dtype=torch.long).reshape(shape),
        completion_mask=torch.tensor(cmask, dtype=torch.bool).reshape(shape),
        advantages=torch.tensor(adv, dtype=torch.float32).reshape(shape),
        engine_logprobs=torch.tensor(elp, dtype=torch.float32).reshape(shape),
        num_seqs=len(seqs),
        num_real_tokens=sum(len(s) for s in seqs),
        source_seq_ids=tuple(s.seq_id for s in seqs),
        spans=tuple(spans),
    )


def token_balanced_groups(lengths: Sequence[int], num_groups: int) -> list[list[int]]:
    """Deal item indices to ``min(num_groups, len(lengths))`` groups, longest first to the group
    with the fewest tokens so far (LPT): totals balance to within one item. Each group lists its
    indices in ascending order. Shared by mini-batches, the ranks of a data-parallel learner and
    micro-batches.
    """
    groups: list[list[int]] = [[] for _ in range(min(num_groups, len(lengths)))]
    heap = [(0, g) for g in range(len(groups))]  # (tokens so far, group index)
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        tokens, g = heapq.heappop(heap)
        groups[g].append(i)
        heapq.heappush(heap, (tokens + lengths[i], g))
    return [sorted(group) for group in groups]
