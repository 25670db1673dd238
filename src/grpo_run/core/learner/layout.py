"""Where the sequences of a packed batch go when the learner runs them as one token stream.

The rows of a :class:`~grpo_run.core.rollout.packing.PackedBatch` are flattened into a *stream*
of real tokens (no padding) that passes through the model's layers; attention then runs per
sequence (:mod:`.attention`). Two views of the same batch:

* the **stream** (``T`` tokens): what the layers compute, one row of work per token;
* the **virtual stream** (``V`` tokens): every sequence whole, in order -- what attention and
  the log-probs see.

Without prompt sharing they are the same. With it, a prompt that several sequences of the batch
start with (the ``G`` samples of a GRPO group) is in the stream once: the other sequences keep
only their own tokens there, and their virtual copies of the prompt point at the shared tokens.
The prompt's hidden states do not depend on what follows it (attention is causal), so every
copy would compute the same values; computing them once gives the same loss, and backward sums
the gradients that reach the shared tokens from every completion (what the copies' gradients
would have summed to). Only float rounding differs.

Virtual sequences are grouped into length buckets, longest first; the virtual stream is ordered
by bucket, so each bucket is a contiguous piece of it.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import torch

BUCKET_FILL = 0.75
"""A sequence joins a length bucket while it is at least this fraction of the bucket's longest:
bounds the padded attention work at ``1 / 0.75**2 = 1.8x`` the real work, in few kernel calls."""


@attrs.frozen(eq=False)
class Bucket:
    """Sequences of similar length, contiguous in the virtual stream, run as one padded attention batch."""

    num_tokens: int
    """Virtual tokens of the bucket's sequences (they follow the previous bucket's)."""
    width: int
    """Longest sequence of the bucket: the padded length."""
    gather: torch.Tensor | None
    """long ``[S_b * width]``: bucket-local virtual token of each slot, row-major (padding slots
    repeat a real one); None when every sequence has ``width`` tokens (then the tokens are just
    reshaped)."""
    valid: torch.Tensor | None
    """long ``[num_tokens]``: the slots holding a token of their sequence (None with ``gather``)."""
    slots: torch.Tensor | None = None
    """With prompt sharing only: long ``[S_b * width]``, the *stream* token of each slot (the
    bucket's gather and the virtual-to-stream map in one)."""


@attrs.frozen(eq=False)
class SequenceLayout:
    """The stream and virtual stream of a packed ``[R, L]`` batch (see the module docstring)."""

    token_index: torch.Tensor
    """long ``[T]``: flat ``row * L + column`` of each stream token in the packed batch (for a
    shared prompt token: its place in the sequence that owns the prompt)."""
    position_ids: torch.Tensor
    """long ``[1, T]``: position of each stream token inside its sequence."""
    cu_seqlens: torch.Tensor
    """int32 ``[S + 1]``: sequence boundaries in the virtual stream (flash-attention's varlen format)."""
    max_seqlen: int
    buckets: tuple[Bucket, ...]
    virtual: torch.Tensor | None = None
    """long ``[V]``: the stream token behind each virtual token; None without sharing (identity)."""
    owner: torch.Tensor | None = None
    """long ``[T]``: the virtual token that is each stream token's own place (None without sharing)."""
    owner_slot: torch.Tensor | None = None
    """long ``[T]``: each stream token's own slot among all buckets' slots, concatenated in bucket
    order (None without sharing)."""
    virtual_flat: torch.Tensor | None = None
    """long ``[V]``: flat packed position of each virtual token (None: ``token_index``)."""
    virtual_positions: torch.Tensor | None = None
    """long ``[V]``: position of each virtual token in its sequence (None: ``position_ids[0]``)."""

    @property
    def num_tokens(self) -> int:
        """Tokens through the layers."""
        return int(self.token_index.shape[0])

    @property
    def num_virtual_tokens(self) -> int:
        """Tokens of all sequences, shared prompts counted once per sequence."""
        return self.num_tokens if self.virtual is None else int(self.virtual.shape[0])

    @property
    def shares(self) -> bool:
        return self.virtual is not None

    def flat_positions(self) -> torch.Tensor:
        """long ``[V]``: flat packed position of each virtual token."""
        return self.token_index if self.virtual_flat is None else self.virtual_flat

    def sequence_positions(self) -> torch.Tensor:
        """long ``[V]``: position of each virtual token in its sequence."""
        return self.position_ids[0] if self.virtual_positions is None else self.virtual_positions

    def stream_of_virtual(self) -> torch.Tensor:
        """long ``[V]``: the stream token behind each virtual token."""
        if self.virtual is not None:
            return self.virtual
        return torch.arange(self.num_tokens, device=self.token_index.device)

    def to(self, device: torch.device | str) -> SequenceLayout:
        if self.token_index.device == torch.device(device):
            return self
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        tensors = ("token_index", "position_ids", "cu_seqlens", "virtual", "owner", "owner_slot",
                   "virtual_flat", "virtual_positions")
        return attrs.evolve(
            self,
            **{name: move(getattr(self, name)) for name in tensors},
            buckets=tuple(attrs.evolve(b, gather=move(b.gather), valid=move(b.valid), slots=move(b.slots))
                          for b in self.buckets),
        )


def length_buckets(lengths: Sequence[int], fill: float = BUCKET_FILL) -> list[list[int]]:
    """Group sequence indices, longest first, so each group's lengths are >= ``fill`` x its longest."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    groups: list[list[int]] = []
    for i in order:
        if groups and lengths[i] >= fill * lengths[groups[-1][0]]:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def sequence_layout(
    spans: Sequence[tuple[int, int, int]],
    row_length: int,
    shared_prefixes: Sequence[tuple[int, ...] | None] | None = None,
) -> SequenceLayout:
    """The layout of a packed batch from its ``spans`` (``(row, start, end)`` per sequence).

    ``shared_prefixes[i]``: the tokens sequence ``i`` starts with that it may share with other
    sequences starting with the same tokens (its prompt), or None. Sequences with an equal prefix
    share it: the first of them in bucket order keeps it in the stream, the others point at it.
    """
    lengths = [end - start for _, start, end in spans]
    groups = length_buckets(lengths)
    order = [i for group in groups for i in group]
    source = _prefix_sources(order, lengths, shared_prefixes)  # place in order -> its prefix's owner's
    # Per virtual token (sequences whole, in bucket order): its sequence's place in ``order``,
    # its position in the sequence, and whether it is the sequence's own (not a shared prompt's).
    n = torch.tensor([lengths[i] for i in order], dtype=torch.long)
    cu = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(n, 0)])
    seq = torch.repeat_interleave(torch.arange(len(order)), n)
    pos = torch.arange(int(cu[-1])) - cu[:-1][seq]
    k = torch.tensor([len(shared_prefixes[i]) if j in source else 0  # type: ignore[index]
                      for j, i in enumerate(order)], dtype=torch.long)
    own = pos >= k[seq]
    base = torch.tensor([spans[i][0] * row_length + spans[i][1] for i in order], dtype=torch.long)
    virtual_flat = base[seq] + pos
    owner = torch.nonzero(own)[:, 0]  # stream token -> its own virtual token
    token_index, positions = virtual_flat[owner], pos[owner]
    sharing = owner.numel() != own.numel()
    virtual: torch.Tensor | None = None  # virtual token -> stream token; identity without sharing
    if sharing:
        stream_of_own = torch.cumsum(own, 0) - 1
        first_own = stream_of_own[cu[:-1]]  # for an owner of a prefix: the stream index of its first token
        src = torch.tensor([source.get(j, j) for j in range(len(order))], dtype=torch.long)
        virtual = torch.where(own, stream_of_own, first_own[src[seq]] + pos)
    buckets = []
    first_virtual = 0
    slots_so_far = 0
    slot_of_virtual = []
    for group in groups:
        sizes = torch.tensor([lengths[i] for i in group])
        width, total = int(sizes[0]), int(sizes.sum())
        gather = valid = None
        local_slots = torch.arange(total)
        if total != width * len(group):
            cols = torch.arange(width)
            start = torch.cumsum(sizes, 0) - sizes
            mask = cols[None, :] < sizes[:, None]
            # Padding slots repeat the sequence's first token: any real value will do (never seen).
            gather = torch.where(mask, start[:, None] + cols[None, :], start[:, None]).flatten()
            valid = torch.nonzero(mask.flatten())[:, 0]
            local_slots = valid
        slots = None
        if sharing:
            assert virtual is not None
            piece = virtual[first_virtual : first_virtual + total]
            slots = piece if gather is None else piece[gather]
            slot_of_virtual.append(slots_so_far + local_slots)
        buckets.append(Bucket(total, width, gather, valid, slots))
        first_virtual += total
        slots_so_far += width * len(group)
    layout = SequenceLayout(
        token_index=token_index,
        position_ids=positions[None],
        cu_seqlens=cu.to(torch.int32),
        max_seqlen=max(lengths, default=0),
        buckets=tuple(buckets),
    )
    if not sharing:
        return layout
    return attrs.evolve(
        layout,
        virtual=virtual,
        owner=owner,
        owner_slot=torch.cat(slot_of_virtual)[owner],
        virtual_flat=virtual_flat,
        virtual_positions=pos,
    )


def _prefix_sources(
    order: Sequence[int], lengths: Sequence[int], prefixes: Sequence[tuple[int, ...] | None] | None
) -> dict[int, int]:
    """For each sequence that takes its prefix from an earlier one, its place in ``order`` -> the
    place of the first sequence in ``order`` with that prefix (which keeps it in the stream)."""
    out: dict[int, int] = {}
    if prefixes is None:
        return out
    first: dict[tuple[int, ...], int] = {}
    for j, i in enumerate(order):
        prefix = prefixes[i]
        if not prefix or len(prefix) > lengths[i]:
            continue
        owner = first.setdefault(prefix, j)
        if owner != j:
            out[j] = owner
    return out
