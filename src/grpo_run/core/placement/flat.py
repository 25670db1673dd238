"""Weights and rollouts as flat buffers, the form in which they cross process boundaries.

Pickling a dict of torch tensors through Ray's object store costs ~10x more than a numpy array,
which travels zero-copy; between local processes a single torch buffer moves through shared
memory (``torch.multiprocessing``'s pickling) instead of one segment per tensor. So weights
travel as one byte buffer plus a layout (:class:`FlatWeights`) and rollout sequences as a few
concatenated numpy arrays (:func:`encode_sequences`).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs
import numpy as np
import torch

from grpo_run.core.rollout.packing import SequenceToPack


@attrs.frozen
class TensorSlot:
    """Where one tensor lives in a :class:`FlatWeights` buffer."""

    name: str
    dtype: str
    """``torch.float32`` -> ``"float32"``."""
    shape: tuple[int, ...]
    offset: int
    """In bytes."""
    nbytes: int


class FlatWeights(Mapping[str, torch.Tensor]):
    """A state dict held in one contiguous byte buffer (a torch ``uint8`` tensor or a numpy
    ``uint8`` array); reading a key gives a tensor view into it (treat it as read-only)."""

    def __init__(self, layout: Sequence[TensorSlot], buffer: torch.Tensor | np.ndarray) -> None:
        self.layout = tuple(layout)
        self.buffer = buffer
        self._slots = {slot.name: slot for slot in self.layout}

    @classmethod
    def from_state_dict(cls, state: Mapping[str, torch.Tensor]) -> FlatWeights:
        """Copy every tensor of ``state`` (any dtypes, any device) into one CPU buffer."""
        layout, offset = [], 0
        for name, tensor in state.items():
            nbytes = tensor.numel() * tensor.element_size()
            layout.append(TensorSlot(name, str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape), offset, nbytes))
            offset += nbytes
        buffer = torch.empty(offset, dtype=torch.uint8)
        for slot, tensor in zip(layout, state.values()):
            view = buffer[slot.offset : slot.offset + slot.nbytes].view(getattr(torch, slot.dtype))
            view.copy_(tensor.detach().reshape(-1).to("cpu"))
        return cls(layout, buffer)

    def to_numpy(self) -> FlatWeights:
        """The same weights over a numpy buffer (zero-copy through Ray's object store)."""
        if isinstance(self.buffer, np.ndarray):
            return self
        return FlatWeights(self.layout, self.buffer.numpy())

    @property
    def nbytes(self) -> int:
        return int(self.buffer.nbytes)

    def __getitem__(self, name: str) -> torch.Tensor:
        slot = self._slots[name]
        raw = self.buffer[slot.offset : slot.offset + slot.nbytes]
        if isinstance(raw, np.ndarray):
            with warnings.catch_warnings():  # a buffer from Ray's object store is read-only
                warnings.simplefilter("ignore", UserWarning)
                raw = torch.from_numpy(raw)
        return raw.view(getattr(torch, slot.dtype)).reshape(slot.shape)

    def __iter__(self) -> Iterator[str]:
        return iter(self._slots)

    def __len__(self) -> int:
        return len(self._slots)

    def __reduce__(self) -> tuple[Any, ...]:
        return (FlatWeights, (self.layout, self.buffer))


def encode_sequences(seqs: Sequence[SequenceToPack]) -> dict[str, np.ndarray]:
    """Rollout sequences as concatenated numpy arrays (see :func:`decode_sequences`)."""
    out = {
        "prompt_lengths": np.array([len(s.prompt_ids) for s in seqs], dtype=np.int64),
        "completion_lengths": np.array([len(s.completion_ids) for s in seqs], dtype=np.int64),
        "tokens": np.array([t for s in seqs for t in (*s.prompt_ids, *s.completion_ids)], dtype=np.int64),
        "engine_logprobs": np.array([x for s in seqs for x in s.engine_logprobs], dtype=np.float64),
        "advantages": np.array([s.advantage for s in seqs], dtype=np.float64),
        "seq_ids": np.array([s.seq_id for s in seqs], dtype=np.int64),
        "loss_mask": np.array([s.loss_mask for s in seqs], dtype=np.bool_),
        # Per-token masks of episode sequences (all true for a single-turn completion).
        "token_mask": np.array(
            [m for s in seqs for m in (s.token_mask if s.token_mask is not None else (True,) * len(s.completion_ids))],
            dtype=np.bool_,
        ),
    }
    if any(s.token_advantages is not None for s in seqs):  # per-turn advantages of episodes
        out["has_token_advantages"] = np.array([s.token_advantages is not None for s in seqs], dtype=np.bool_)
        out["token_advantages"] = np.array(
            [a for s in seqs for a in (s.token_advantages if s.token_advantages is not None
                                       else (s.advantage,) * len(s.completion_ids))], dtype=np.float64)
    return out


def decode_sequences(data: Mapping[str, np.ndarray]) -> list[SequenceToPack]:
    """Undo :func:`encode_sequences` (values are identical: float64 log-probs and advantages)."""
    seqs = []
    tokens = data["tokens"].tolist()
    logprobs = data["engine_logprobs"].tolist()
    token_mask = data["token_mask"].tolist() if "token_mask" in data else None
    token_advs = data["token_advantages"].tolist() if "token_advantages" in data else None
    at, at_lp = 0, 0
    for i, (p, c) in enumerate(zip(data["prompt_lengths"].tolist(), data["completion_lengths"].tolist())):
        seqs.append(
            SequenceToPack(
                prompt_ids=tokens[at : at + p],
                completion_ids=tokens[at + p : at + p + c],
                advantage=float(data["advantages"][i]),
                engine_logprobs=logprobs[at_lp : at_lp + c],
                seq_id=int(data["seq_ids"][i]),
                loss_mask=bool(data["loss_mask"][i]),
                token_mask=_token_mask(token_mask, at_lp, c),
                token_advantages=(tuple(token_advs[at_lp : at_lp + c])
                                  if token_advs is not None and data["has_token_advantages"][i] else None),
            )
        )
        at += p + c
        at_lp += c
    return seqs


def _token_mask(flat: list[bool] | None, start: int, count: int) -> tuple[bool, ...] | None:
    if flat is None:
        return None
    mask = tuple(flat[start : start + count])
    return None if all(mask) else mask
