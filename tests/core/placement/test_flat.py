"""Weights and rollouts as flat buffers: exact round trips, one buffer, views by name."""

from __future__ import annotations

import math

import pickle

import attrs

import numpy as np
import torch

from support.learner import make_seqs

from grpo_run.core.placement.flat import FlatWeights, decode_sequences, encode_sequences


def test_flat_weights_round_trip_mixed_dtypes_exactly() -> None:
    state = {
        "a": torch.randn(3, 4),
        "b": torch.randn(5, dtype=torch.float64),
        "c": torch.randn(2, 2).to(torch.bfloat16),
        "d": torch.arange(6, dtype=torch.int64).reshape(2, 3),
    }
    flat = FlatWeights.from_state_dict(state)
    assert flat.nbytes == 12 * 4 + 5 * 8 + 4 * 2 + 6 * 8  # one buffer, no padding
    assert list(flat) == ["a", "b", "c", "d"] and len(flat) == 4
    for key, tensor in state.items():
        assert flat[key].dtype == tensor.dtype and torch.equal(flat[key], tensor)
    # A copy, not a view of the source: training may go on.
    state["a"].add_(1.0)
    assert not torch.equal(flat["a"], state["a"])


def test_numpy_form_and_pickling_keep_values() -> None:
    state = {"w": torch.randn(4, 3), "h": torch.randn(7).to(torch.bfloat16)}
    flat = FlatWeights.from_state_dict(state).to_numpy()
    assert isinstance(flat.buffer, np.ndarray) and flat.buffer.dtype == np.uint8
    flat.buffer.setflags(write=False)  # as it comes out of Ray's object store
    again = pickle.loads(pickle.dumps(flat))
    assert all(torch.equal(again[k], state[k]) for k in state)
    model = torch.nn.Linear(3, 4, bias=False)
    model.load_state_dict({"weight": flat["w"]})  # engines load straight from the views
    assert torch.equal(model.weight, state["w"])


def test_sequences_round_trip_exactly() -> None:
    seqs = make_seqs(7, seed=4)
    seqs[2] = attrs.evolve(seqs[2], loss_mask=False, advantage=1 / 3)
    encoded = encode_sequences(seqs)
    assert set(encoded) == {"prompt_lengths", "completion_lengths", "tokens", "engine_logprobs", "advantages",
                            "seq_ids", "loss_mask", "token_mask"}
    assert all(isinstance(v, np.ndarray) for v in encoded.values())
    assert decode_sequences(encoded) == seqs
    assert decode_sequences(encode_sequences([])) == []


def test_episode_masks_and_nan_logprobs_cross_the_transport() -> None:
    seq = attrs.evolve(make_seqs(1, seed=5)[0], completion_ids=[5, 6, 7, 8, 9], engine_logprobs=[-1.0, -2.0, -3.0, -4.0, -5.0])
    n = len(seq.completion_ids)
    mask = tuple(k % 3 != 1 for k in range(n))
    logprobs = [lp if keep else float("nan") for lp, keep in zip(seq.engine_logprobs, mask)]
    episode = attrs.evolve(seq, token_mask=mask, engine_logprobs=logprobs)
    (back,) = decode_sequences(encode_sequences([episode]))
    assert back.token_mask == mask and back.completion_ids == seq.completion_ids
    assert [math.isnan(x) for x in back.engine_logprobs] == [not keep for keep in mask]
