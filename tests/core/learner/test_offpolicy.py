"""Engine/trainer mismatch correction, KL in the reward and the Polyak update, against
hand-computed numbers; then the correction inside a learner step."""

from __future__ import annotations

import math

import pytest
import torch
from support.learner import make_seqs, make_spec, params_of, tiny_model

from grpo_run.core.learner.learner import Learner
from grpo_run.core.learner.logprobs import packed_token_logprobs
from grpo_run.core.learner.offpolicy import kl_reward_advantages, mismatch_weights, polyak_update
from grpo_run.core.rollout.packing import pack_sequences
from grpo_run.plugins.losses.dapo import DapoLoss

# One row, two sequences: seq 0 = tokens 1..3, seq 1 = tokens 4..5; position 0 is a prompt token.
# log rho = old - engine per token: seq 0: log 3, log 0.5, 0 -> rho 3, 0.5, 1 (product 1.5)
#                                   seq 1: log 0.1, log 2       -> rho 0.1, 2   (product 0.2)
MASK = torch.tensor([[False, True, True, True, True, True]])
SEQ = torch.tensor([[0, 0, 0, 0, 1, 1]])
ENGINE = torch.tensor([[0.0, -2.0, -1.0, -1.5, -0.5, -3.0]], dtype=torch.float64)
RHO = torch.tensor([[0.0, 3.0, 0.5, 1.0, 0.1, 2.0]], dtype=torch.float64)
OLD = ENGINE + torch.where(MASK, RHO, torch.ones_like(RHO)).log()


@pytest.mark.parametrize(
    ("mode", "upper", "lower", "expected", "kept", "capped"),
    [
        # min(rho, 2)
        ("token-truncate", 2.0, 0.0, [0, 2.0, 0.5, 1.0, 0.1, 2.0], 1.0, 1 / 5),
        # keep rho in [0.4, 2.5]: drops 3 and 0.1
        ("token-mask", 2.5, 0.4, [0, 0, 1, 1, 0, 1], 3 / 5, 0.0),
        # sequence products 1.5 and 0.2, capped at 1.2
        ("sequence-truncate", 1.2, 0.0, [0, 1.2, 1.2, 1.2, 0.2, 0.2], 1.0, 3 / 5),
        # keep products in [0.5, 2]: seq 0 (1.5) kept, seq 1 (0.2) dropped
        ("sequence-mask", 2.0, 0.5, [0, 1, 1, 1, 0, 0], 3 / 5, 0.0),
    ],
)
def test_mismatch_weights_hand_computed(mode, upper, lower, expected, kept, capped) -> None:
    weights, metrics = mismatch_weights(OLD, ENGINE, MASK, SEQ, 2, mode, upper, lower)
    torch.testing.assert_close(weights.double(), torch.tensor([expected], dtype=torch.float64), rtol=0, atol=1e-6)
    assert metrics["mismatch/kept_frac"] == pytest.approx(kept)
    assert metrics["mismatch/capped_frac"] == pytest.approx(capped)
    assert metrics["mismatch/weight_mean"] == pytest.approx(sum(expected) / 5, rel=1e-6)
    assert metrics["mismatch/rho_mean"] == pytest.approx((3 + 0.5 + 1 + 0.1 + 2) / 5, rel=1e-6)
    assert not weights.requires_grad


def test_sequence_ratio_is_clamped_in_log_space() -> None:
    # 30 tokens of log rho = 1: the product e^30 is clamped to e^20 before the cap.
    mask = torch.ones(1, 30, dtype=torch.bool)
    weights, _ = mismatch_weights(torch.ones(1, 30), torch.zeros(1, 30), mask, torch.zeros(1, 30, dtype=torch.long),
                                  1, "sequence-truncate", upper=1e12)
    torch.testing.assert_close(weights, torch.full((1, 30), math.exp(20.0)), rtol=1e-6, atol=0)


def test_kl_reward_advantages_hand_computed() -> None:
    # KL per token 0.1, 0.2, 0.3 (seq 0, sum 0.6) and 1.0, 2.0 (seq 1, sum 3); beta 0.5:
    # seq 0: A = 1.0 - 0.3 = 0.7; seq 1: A = -1.0 - 1.5 = -2.5.
    adv = torch.tensor([[0.0, 1.0, 1.0, 1.0, -1.0, -1.0]])
    kl = torch.tensor([[9.0, 0.1, 0.2, 0.3, 1.0, 2.0]], requires_grad=True)
    out, metrics = kl_reward_advantages(adv, kl, 0.5, MASK, SEQ, 2)
    torch.testing.assert_close(out, torch.tensor([[0.0, 0.7, 0.7, 0.7, -2.5, -2.5]]))
    assert metrics["kl/sequence_mean"] == pytest.approx((0.6 + 3.0) / 2)
    assert metrics["kl/reward_penalty_mean"] == pytest.approx(0.5 * 1.8)
    assert not out.requires_grad


def test_polyak_update_formula() -> None:
    ref, pol = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    r0, p0 = params_of(ref), params_of(pol)
    polyak_update(ref, pol, 0.3)
    for r, a, b in zip(ref.parameters(), r0, p0):
        torch.testing.assert_close(r, 0.3 * b + 0.7 * a, rtol=0, atol=1e-7)
    assert all(torch.equal(p, b) for p, b in zip(pol.parameters(), p0))


def test_learner_mask_everything_leaves_the_policy_unchanged() -> None:
    # Engine log-probs around -3 vs learner ~ -3.2: rho ~ 0.8 per token; a kept range of
    # [10, 20] drops every token, so the policy loss and its gradient are zero.
    model = tiny_model()
    before = params_of(model)
    cfg = make_spec(mismatch_correction="token-mask", mismatch_lower=10.0, mismatch_upper=20.0)
    metrics = Learner(cfg, model, None, DapoLoss(), None).train_step(make_seqs())
    assert metrics["mismatch/kept_frac"] == 0.0 and metrics["loss/policy"] == 0.0
    assert metrics["optim/grad_norm"] == 0.0
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before))


def test_learner_truncation_scales_the_loss_by_the_weights() -> None:
    # Single update: ratio 1, so DAPO's per-token loss is -A; with weights w = min(rho, 0.9) the
    # token-mean loss is -sum(w * A) / n. Check against an independent float64 computation.
    seqs = make_seqs()
    model = tiny_model()
    batch = pack_sequences(seqs, 16, 0)
    with torch.no_grad():
        old = packed_token_logprobs(model, batch).double()
    m = batch.completion_mask
    w = (old - batch.engine_logprobs.double()).exp().clamp(max=0.9)
    expected = float(-(w * batch.advantages.double())[m].sum() / m.sum())
    cfg = make_spec(mismatch_correction="token-truncate", mismatch_upper=0.9)
    metrics = Learner(cfg, model, None, DapoLoss(), None).train_step(seqs)
    assert metrics["loss/policy"] == pytest.approx(expected, rel=1e-5)
