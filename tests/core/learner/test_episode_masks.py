"""A learner step on episode sequences: environment tokens (mask 0, NaN engine log-probs) change
nothing -- not the ratio, not the mismatch weights, not the denominator -- and a NaN on a loss
token is refused instead of poisoning the update."""

from __future__ import annotations

import math

import attrs
import pytest
import torch

from grpo_run.core.learner.learner import Learner
from grpo_run.core.rollout.packing import SequenceToPack
from grpo_run.plugins.losses.dapo import DapoLoss
from support.learner import make_spec, params_of, tiny_model

SAMPLED = (True, True, True, False, False, False, True, True)
"""Turn 1 (3 ids), a bridge of 3 environment ids, turn 2 (2 ids)."""


def episode(env_logprob: float, env_ids=(9, 10, 11), seq_id: int = 0, advantage: float = 1.0) -> SequenceToPack:
    completion = [5, 6, 1, *env_ids, 7, 1]
    logprobs = [-2.0, -2.5, -1.0, *([env_logprob] * 3), -3.0, -0.5]
    return SequenceToPack([2, 3, 4], completion, advantage, logprobs, seq_id, token_mask=SAMPLED)


def step(seqs, **alg):
    model = tiny_model()
    metrics = Learner(make_spec(**alg), model, None, DapoLoss(), None).train_step(seqs)
    return metrics, params_of(model)


@pytest.mark.parametrize("alg", [
    {"use_engine_logprobs_as_old": True},
    {"mismatch_correction": "token-truncate", "mismatch_upper": 2.0},
    {"loss_denominator": "token"},
])
def test_environment_tokens_change_nothing_in_an_update(alg):
    nan_metrics, nan_params = step([episode(math.nan), episode(math.nan, seq_id=1, advantage=-1.0)], **alg)
    # Any other log-prob on the masked positions gives exactly the same update: they are never read.
    other_metrics, other_params = step([episode(-7.0), episode(-7.0, seq_id=1, advantage=-1.0)], **alg)
    assert all(math.isfinite(v) for v in nan_metrics.values())
    assert nan_metrics["loss/policy"] == pytest.approx(other_metrics["loss/policy"], abs=1e-7)
    for a, b in zip(nan_params, other_params):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_trained_environment_tokens_without_engine_logprobs_are_refused():
    trained = attrs.evolve(episode(math.nan), token_mask=None)
    with pytest.raises(RuntimeError, match="3 loss tokens have no engine log-prob"):
        step([trained], use_engine_logprobs_as_old=True)
    metrics, params = step([trained])  # pi_old from the learner itself: nothing reads them
    assert math.isfinite(metrics["loss/policy"]) and all(torch.isfinite(p).all() for p in params)
