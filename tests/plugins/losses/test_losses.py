"""The dapo loss and loss aggregation, against hand-computed numbers."""

from __future__ import annotations

import math

import attrs
import pytest
import torch

from grpo_run import LossInputs
from grpo_run.core.learner.aggregation import aggregate
from grpo_run.plugins.losses.dapo import DapoConfig, DapoLoss

LN = math.log

# One row of 6 positions; the last one is padding (mask false, garbage log-probs).
#   t  ratio  A    clip(ratio, 0.8, 1.28)  ratio*A  clip*A   min     loss   branch
#   0  1.5   +1    1.28                     1.5     1.28     1.28   -1.28   clipped high (no grad)
#   1  1.5   -1    1.28                    -1.5    -1.28    -1.5     1.5    unclipped
#   2  0.5   +2    0.8                      1.0     1.6      1.0    -1.0    unclipped
#   3  0.5   -2    0.8                     -1.0    -1.6     -1.6     1.6    clipped low (no grad)
#   4  1.0   +0.5  1.0                      0.5     0.5      0.5    -0.5    unclipped
#   5  pad                                                            0
# clip_frac_high = 1/5, clip_frac_low = 1/5, ratio_mean = (1.5 + 1.5 + 0.5 + 0.5 + 1) / 5 = 1.0
RATIOS = [1.5, 1.5, 0.5, 0.5, 1.0]
ADV = [1.0, -1.0, 2.0, -2.0, 0.5, 0.0]
EXPECTED_LOSS = [-1.28, 1.5, -1.0, 1.6, -0.5, 0.0]


def _inputs() -> tuple[LossInputs, torch.Tensor]:
    old = torch.tensor([[-1.0, -2.0, -0.5, -1.5, -0.7, 0.0]], dtype=torch.float64)
    new = old.clone()
    new[0, :5] += torch.tensor([LN(r) for r in RATIOS], dtype=torch.float64)
    new[0, 5] = 1e4  # garbage on padding: exp would overflow without the masking inside the loss
    new.requires_grad_(True)
    inputs = LossInputs(
        logprobs=new,
        old_logprobs=old,
        advantages=torch.tensor([ADV], dtype=torch.float64),
        mask=torch.tensor([[True] * 5 + [False]]),
        seq_ids=torch.tensor([[0, 0, 0, 1, 1, -1]]),
        num_seqs=2,
    )
    return inputs, new


def test_dapo_hand_computed_values_and_metrics() -> None:
    inputs, _ = _inputs()
    out = DapoLoss(DapoConfig(clip_lower=0.2, clip_higher=0.28))(inputs)
    torch.testing.assert_close(out.per_token_loss, torch.tensor([EXPECTED_LOSS], dtype=torch.float64))
    assert float(out.metrics["clip_frac_high"]) == pytest.approx(0.2, abs=1e-12)
    assert float(out.metrics["clip_frac_low"]) == pytest.approx(0.2, abs=1e-12)
    assert float(out.metrics["ratio_mean"]) == pytest.approx(1.0, abs=1e-12)


def test_dapo_gradient_matches_closed_form() -> None:
    # d loss_t / d logp_t = -A_t * ratio_t on unclipped tokens (d ratio / d logp = ratio), 0 on
    # clipped ones and on padding: [0, 1.5, -1.0, 0, -0.5, 0] for the table above.
    inputs, new = _inputs()
    DapoLoss(DapoConfig())(inputs).per_token_loss.sum().backward()
    expected = torch.tensor([[0.0, 1.5, -1.0, 0.0, -0.5, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(new.grad, expected, rtol=0, atol=1e-12)
    assert torch.isfinite(new.grad).all()


def test_dapo_decoupled_bounds() -> None:
    # Symmetric clip 0.2 on both sides: token 0 (ratio 1.5, A=+1) clips at 1.2 -> loss -1.2.
    inputs, _ = _inputs()
    out = DapoLoss(DapoConfig(clip_lower=0.2, clip_higher=0.2))(inputs)
    assert float(out.per_token_loss[0, 0].detach()) == pytest.approx(-1.2)
    # A wide upper bound (1 + 1.0 = 2 > 1.5) leaves it unclipped: loss -1.5, clip_frac_high 0.
    out = DapoLoss(DapoConfig(clip_lower=0.2, clip_higher=1.0))(inputs)
    assert float(out.per_token_loss[0, 0].detach()) == pytest.approx(-1.5)
    assert float(out.metrics["clip_frac_high"]) == 0.0


def test_dapo_config_validated() -> None:
    assert (DapoConfig().clip_lower, DapoConfig().clip_higher) == (0.2, 0.28)
    with pytest.raises(ValueError, match="clip_lower"):
        DapoConfig(clip_lower=1.0)
    with pytest.raises(ValueError, match="clip_lower"):
        DapoConfig(clip_lower=-0.1)
    with pytest.raises(ValueError, match="clip_higher"):
        DapoConfig(clip_higher=-0.01)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        DapoConfig().clip_lower = 0.1  # type: ignore[misc]


def test_dapo_registered() -> None:
    from grpo_run.plugins import losses

    seen: list[type] = []
    losses.grpo_run_register_losses(seen.append)
    assert DapoLoss in seen and DapoLoss.name == "dapo"


# --- aggregation -------------------------------------------------------------------------------
# Two rows; sequences 0 and 1 in row 0, sequence 2 in row 1, sequence 3 fully masked (loss_mask
# false), -1 padding holding inf that must not leak.
#   seq 0: masked losses 1, 2, 3   sum 6   mean 2
#   seq 1: masked loss  4          sum 4   mean 4
#   seq 2: masked losses 10, 20    sum 30  mean 15
#   seq 3: none (value 100 unmasked)
LOSS = torch.tensor([[9.0, 1.0, 2.0, 3.0, 9.0, 4.0], [9.0, 10.0, 20.0, 100.0, math.inf, math.inf]])
MASK = torch.tensor([[False, True, True, True, False, True], [False, True, True, False, False, False]])
SEQ = torch.tensor([[0, 0, 0, 0, 1, 1], [2, 2, 2, 3, -1, -1]])


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", (1 + 2 + 3 + 4 + 10 + 20) / 6),  # 40 / 6 = 6.6667
        ("seq-mean-token-mean", (2 + 4 + 15) / 3),  # 7, seq 3 has no token so is not counted
        ("seq-mean-token-sum", (6 + 4 + 30) / 3),  # 13.3333
    ],
)
def test_aggregate_modes(mode: str, expected: float) -> None:
    loss = LOSS.clone().requires_grad_(True)
    value = aggregate(loss, MASK, SEQ, num_seqs=4, mode=mode)  # type: ignore[arg-type]
    assert float(value.detach()) == pytest.approx(expected, rel=1e-6)
    value.backward()
    assert torch.isfinite(loss.grad).all() and (loss.grad[~MASK] == 0).all()


def test_aggregate_gradient_weights() -> None:
    # seq-mean-token-mean: token of sequence s gets weight 1 / (n_s * num_counted_seqs):
    # seq 0 -> 1/9, seq 1 -> 1/3, seq 2 -> 1/6.
    loss = LOSS.clone().requires_grad_(True)
    aggregate(loss, MASK, SEQ, 4, "seq-mean-token-mean").backward()
    expected = torch.tensor([[0, 1 / 9, 1 / 9, 1 / 9, 0, 1 / 3], [0, 1 / 6, 1 / 6, 0, 0, 0]])
    torch.testing.assert_close(loss.grad, expected)


def test_aggregate_empty_mask_is_zero_with_graph() -> None:
    loss = torch.ones(2, 3, requires_grad=True)
    for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"):
        value = aggregate(loss, torch.zeros(2, 3, dtype=torch.bool), torch.zeros(2, 3, dtype=torch.long), 1, mode)  # type: ignore[arg-type]
        assert float(value.detach()) == 0.0 and value.requires_grad


def test_aggregate_unknown_mode() -> None:
    with pytest.raises(ValueError, match="unknown aggregation mode 'seq-sum'"):
        aggregate(LOSS, MASK, SEQ, 4, "seq-sum")  # type: ignore[arg-type]
