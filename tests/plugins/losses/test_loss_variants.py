"""The grpo, dr_grpo, cispo and gspo losses (and dapo's dual clip).

Each loss is checked three ways: hand-computed numbers for its clip branches, an independent
float64 reference of its formula written token by token in plain Python (values, metrics and
gradients, under every aggregation mode), and ``torch.autograd.gradcheck`` where the loss value
is the objective being differentiated.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import attrs
import cattrs
import pytest
import torch

from grpo_run import LossInputs
from grpo_run.core.config.hooks import register_strict_hooks
from grpo_run.core.learner.aggregation import AGGREGATION_MODES, aggregate
from grpo_run.plugins.losses.cispo import CispoConfig, CispoLoss
from grpo_run.plugins.losses.dapo import DapoConfig, DapoLoss
from grpo_run.plugins.losses.dr_grpo import DrGrpoConfig, DrGrpoLoss
from grpo_run.plugins.losses.grpo import GrpoConfig, GrpoLoss
from grpo_run.plugins.losses.gspo import GspoConfig, GspoLoss

LN = math.log
F64 = torch.float64


def _one_row(ratios: list[float], adv: list[float], logp: list[float], seq_ids: list[int]) -> tuple[LossInputs, torch.Tensor]:
    """One row, all positions masked; ``old = logp - ln(ratio)``."""
    new = torch.tensor([logp], dtype=F64, requires_grad=True)
    old = torch.tensor([[lp - LN(r) for lp, r in zip(logp, ratios, strict=True)]], dtype=F64)
    inputs = LossInputs(
        logprobs=new,
        old_logprobs=old,
        advantages=torch.tensor([adv], dtype=F64),
        mask=torch.ones(1, len(ratios), dtype=torch.bool),
        seq_ids=torch.tensor([seq_ids]),
        num_seqs=max(seq_ids) + 1,
    )
    return inputs, new


# --- hand-computed clip branches -----------------------------------------------------------------
# grpo, clip 0.2 (bounds 0.8 / 1.2):
#   t  ratio  A     clip*A   ratio*A  min    loss  branch                  d loss / d logp = -A * ratio
#   0  1.5   +1     1.2      1.5      1.2   -1.2   clipped high            0
#   1  1.5   -1    -1.2     -1.5     -1.5    1.5   unclipped               1.5
#   2  0.5   +2     1.6      1.0      1.0   -1.0   unclipped              -1.0
#   3  0.5   -2    -1.6     -1.0     -1.6    1.6   clipped low             0
#   4  1.0   +0.5   0.5      0.5      0.5   -0.5   unclipped              -0.5
# dual clip delta = 1.4: token 1 (A < 0, ratio 1.5 > 1.4) becomes max(-1.5, 1.4 * -1) = -1.4 -> loss
# 1.4 with zero gradient; nothing else changes (token 3's ratio 0.5 < 1.4).
RATIOS = [1.5, 1.5, 0.5, 0.5, 1.0]
ADV = [1.0, -1.0, 2.0, -2.0, 0.5]
LOGP = [-1.0, -2.0, -0.5, -1.5, -0.7]
SEQS = [0, 0, 0, 1, 1]


@pytest.mark.parametrize("loss_cls", [GrpoLoss, DrGrpoLoss])
def test_grpo_hand_computed(loss_cls: type) -> None:
    inputs, new = _one_row(RATIOS, ADV, LOGP, SEQS)
    out = loss_cls(loss_cls.Config(clip=0.2))(inputs)
    torch.testing.assert_close(out.per_token_loss, torch.tensor([[-1.2, 1.5, -1.0, 1.6, -0.5]], dtype=F64))
    out.per_token_loss.sum().backward()
    torch.testing.assert_close(new.grad, torch.tensor([[0.0, 1.5, -1.0, 0.0, -0.5]], dtype=F64))
    assert float(out.metrics["clip_frac_high"]) == pytest.approx(0.2)
    assert float(out.metrics["clip_frac_low"]) == pytest.approx(0.2)
    # ratio mean (1.5 + 1.5 + 0.5 + 0.5 + 1) / 5 = 1; variance (4 * 0.25 + 0) / 5 = 0.2
    assert float(out.metrics["ratio_mean"]) == pytest.approx(1.0)
    assert float(out.metrics["ratio_var"]) == pytest.approx(0.2)
    assert "clip_frac_dual" not in out.metrics


@pytest.mark.parametrize(
    ("loss_cls", "config"),
    [(GrpoLoss, GrpoConfig(clip=0.2, delta=1.4)), (DapoLoss, DapoConfig(clip_lower=0.2, clip_higher=0.2, delta=1.4))],
)
def test_dual_clip_hand_computed(loss_cls: type, config: object) -> None:
    inputs, new = _one_row(RATIOS, ADV, LOGP, SEQS)
    out = loss_cls(config)(inputs)
    torch.testing.assert_close(out.per_token_loss, torch.tensor([[-1.2, 1.4, -1.0, 1.6, -0.5]], dtype=F64))
    out.per_token_loss.sum().backward()
    torch.testing.assert_close(new.grad, torch.tensor([[0.0, 0.0, -1.0, 0.0, -0.5]], dtype=F64))
    assert float(out.metrics["clip_frac_dual"]) == pytest.approx(0.2)
    # A delta above every negative-advantage ratio changes nothing.
    wide = attrs.evolve(config, delta=3.0)  # type: ignore[misc]
    out = loss_cls(wide)(inputs)
    torch.testing.assert_close(out.per_token_loss, torch.tensor([[-1.2, 1.5, -1.0, 1.6, -0.5]], dtype=F64))
    assert float(out.metrics["clip_frac_dual"]) == 0.0


def test_cispo_hand_computed() -> None:
    # clip_higher 5 caps the weight at 6. loss = -w * A * logp, d loss / d logp = -w * A.
    #   t  ratio  A    logp   w     loss                      grad
    #   0  0.5   +1   -1.0   0.5   -(0.5)(1)(-1)   =  0.5    -0.5
    #   1  2.0   -1   -0.5   2.0   -(2)(-1)(-0.5)  = -1.0     2.0
    #   2  8.0   +2   -2.0   6.0   -(6)(2)(-2)     = 24.0   -12.0   truncated (clip_frac_high 1/3)
    inputs, new = _one_row([0.5, 2.0, 8.0], [1.0, -1.0, 2.0], [-1.0, -0.5, -2.0], [0, 1, 2])
    out = CispoLoss(CispoConfig(clip_higher=5.0))(inputs)
    torch.testing.assert_close(out.per_token_loss, torch.tensor([[0.5, -1.0, 24.0]], dtype=F64))
    out.per_token_loss.sum().backward()
    torch.testing.assert_close(new.grad, torch.tensor([[-0.5, 2.0, -12.0]], dtype=F64))
    assert float(out.metrics["clip_frac_high"]) == pytest.approx(1 / 3)
    assert float(out.metrics["clip_frac_low"]) == 0.0
    # Lower bound 1 - 0.2 = 0.8 lifts token 0's weight: loss -(0.8)(1)(-1) = 0.8, grad -0.8.
    inputs, new = _one_row([0.5, 2.0, 8.0], [1.0, -1.0, 2.0], [-1.0, -0.5, -2.0], [0, 1, 2])
    out = CispoLoss(CispoConfig(clip_higher=5.0, clip_lower=0.2))(inputs)
    torch.testing.assert_close(out.per_token_loss, torch.tensor([[0.8, -1.0, 24.0]], dtype=F64))
    out.per_token_loss.sum().backward()
    torch.testing.assert_close(new.grad, torch.tensor([[-0.8, 2.0, -12.0]], dtype=F64))
    assert float(out.metrics["clip_frac_low"]) == pytest.approx(1 / 3)


def test_gspo_hand_computed() -> None:
    # seq 0: token ratios 1.21 and 1 -> s0 = exp((ln 1.21 + 0) / 2) = 1.1, A = +1
    # seq 1: token ratios 0.81 and 1 -> s1 = 0.9, A = -1
    # clip_lower 0.05, clip_higher 0.2 (bounds 0.95 / 1.2):
    #   seq 0: min(1.1, 1.1) -> loss -1.1 on both tokens (unclipped)
    #   seq 1: min(-0.9, -0.95) = -0.95 -> loss 0.95 on both tokens (clipped low, no gradient)
    # seq-mean-token-mean weights each token 1 / (2 seqs * 2 tokens) = 0.25, and the GSPO-token
    # gradient is -A * s0 per token: -0.275 on *both* tokens of seq 0, even the one with ratio 1.
    inputs, new = _one_row([1.21, 1.0, 0.81, 1.0], [1.0, 1.0, -1.0, -1.0], [-1.0, -2.0, -0.3, -0.4], [0, 0, 1, 1])
    out = GspoLoss(GspoConfig(clip_lower=0.05, clip_higher=0.2))(inputs)
    torch.testing.assert_close(out.per_token_loss, torch.tensor([[-1.1, -1.1, 0.95, 0.95]], dtype=F64))
    aggregate(out.per_token_loss, inputs.mask, inputs.seq_ids, 2, "seq-mean-token-mean").backward()
    torch.testing.assert_close(new.grad, torch.tensor([[-0.275, -0.275, 0.0, 0.0]], dtype=F64))
    assert float(out.metrics["clip_frac_low"]) == pytest.approx(0.5)
    assert float(out.metrics["clip_frac_high"]) == 0.0
    # ratio_mean over tokens (1.1 + 1.1 + 0.9 + 0.9) / 4 = 1, ratio_var = 0.01
    assert float(out.metrics["ratio_mean"]) == pytest.approx(1.0)
    assert float(out.metrics["ratio_var"]) == pytest.approx(0.01)
    # Upper bound 1.05 < s0 = 1.1: seq 0 clipped high -> loss -1.05, no gradient anywhere.
    inputs, new = _one_row([1.21, 1.0, 0.81, 1.0], [1.0, 1.0, -1.0, -1.0], [-1.0, -2.0, -0.3, -0.4], [0, 0, 1, 1])
    out = GspoLoss(GspoConfig(clip_lower=0.05, clip_higher=0.05))(inputs)
    torch.testing.assert_close(out.per_token_loss, torch.tensor([[-1.05, -1.05, 0.95, 0.95]], dtype=F64))
    out.per_token_loss.sum().backward()
    assert (new.grad == 0).all()
    assert float(out.metrics["clip_frac_high"]) == pytest.approx(0.5)


# --- random packed inputs against plain float64 references -----------------------------------
# Three rows of 14 positions. Each sequence is (prompt tokens, completion tokens): prompt tokens
# carry the sequence id but no mask; padding is -1. Sequence 5 has no completion token at all.
LAYOUT = [[(2, 4), (1, 3)], [(3, 8), (1, 2)], [(2, 5), (2, 0)]]
LENGTH = 14


def _random_inputs(seed: int, noise: float) -> tuple[LossInputs, torch.Tensor]:
    rng = random.Random(seed)
    new, old, adv, mask, seq = ([[0.0] * LENGTH for _ in LAYOUT] for _ in range(5))
    sid = 0
    for r, row in enumerate(LAYOUT):
        pos = 0
        for prompt, completion in row:
            a = rng.gauss(0.0, 1.0)
            for k in range(prompt + completion):
                on = k >= prompt
                old[r][pos] = -rng.uniform(0.05, 3.0)
                new[r][pos] = old[r][pos] + rng.gauss(0.0, noise) if on else 1e4  # garbage off the mask
                adv[r][pos], mask[r][pos], seq[r][pos] = a, on, sid
                pos += 1
            sid += 1
        for p in range(pos, LENGTH):
            new[r][p], old[r][p], adv[r][p], seq[r][p] = 1e4, -1e4, 7.0, -1
    new_t = torch.tensor(new, dtype=F64, requires_grad=True)
    inputs = LossInputs(
        logprobs=new_t,
        old_logprobs=torch.tensor(old, dtype=F64),
        advantages=torch.tensor(adv, dtype=F64),
        mask=torch.tensor(mask, dtype=torch.bool),
        seq_ids=torch.tensor(seq),
        num_seqs=sid,
    )
    return inputs, new_t


def _tokens(inputs: LossInputs) -> list[tuple[int, int, int, float, float, float]]:
    """(row, col, seq, logp, old_logp, A) of every masked token, as Python floats."""
    out = []
    for r in range(inputs.mask.shape[0]):
        for c in range(inputs.mask.shape[1]):
            if bool(inputs.mask[r, c]):
                out.append((
                    r, c, int(inputs.seq_ids[r, c]), float(inputs.logprobs[r, c].detach()),
                    float(inputs.old_logprobs[r, c]), float(inputs.advantages[r, c]),
                ))
    return out


def _ref_ppo(cfg_low: float, cfg_high: float, delta: float | None) -> Callable:
    """Per-token (loss, d loss / d logp, ratio, clipped_low, clipped_high) of PPO's clipped surrogate."""

    def token(lp: float, olp: float, a: float, _seq_ratio: float) -> tuple[float, float, float, bool, bool]:
        r = math.exp(lp - olp)
        lo, hi = 1.0 - cfg_low, 1.0 + cfg_high
        unclipped, clipped = r * a, min(max(r, lo), hi) * a
        objective, grad = (unclipped, -a * r) if unclipped <= clipped else (clipped, 0.0)
        if delta is not None and a < 0 and delta * a > objective:
            objective, grad = delta * a, 0.0
        return -objective, grad, r, r < lo and a < 0, r > hi and a > 0

    return token


def _ref_cispo(clip_higher: float, clip_lower: float | None) -> Callable:
    def token(lp: float, olp: float, a: float, _seq_ratio: float) -> tuple[float, float, float, bool, bool]:
        r = math.exp(lp - olp)
        w = min(r, 1.0 + clip_higher)
        if clip_lower is not None:
            w = max(w, 1.0 - clip_lower)
        low = clip_lower is not None and r < 1.0 - clip_lower
        return -w * a * lp, -w * a, r, low, r > 1.0 + clip_higher

    return token


def _ref_gspo(clip_lower: float, clip_higher: float) -> Callable:
    # The token's loss is its sequence's: -min(s A, clip(s) A); the gradient of the sequence-level
    # objective w.r.t. one of its tokens' logp, per unit of the token's aggregation weight, is -A s
    # when unclipped (d s / d logp_t = s / n, and the n tokens' weights sum to n times one weight).
    def token(_lp: float, _olp: float, a: float, s: float) -> tuple[float, float, float, bool, bool]:
        lo, hi = 1.0 - clip_lower, 1.0 + clip_higher
        unclipped, clipped = s * a, min(max(s, lo), hi) * a
        loss, grad = (-unclipped, -a * s) if unclipped <= clipped else (-clipped, 0.0)
        return loss, grad, s, s < lo and a < 0, s > hi and a > 0

    return token


CASES = [
    ("grpo", GrpoLoss(GrpoConfig(clip=0.2)), _ref_ppo(0.2, 0.2, None), 0.3),
    ("grpo-dual", GrpoLoss(GrpoConfig(clip=0.2, delta=1.25)), _ref_ppo(0.2, 0.2, 1.25), 0.3),
    ("dr_grpo", DrGrpoLoss(DrGrpoConfig(clip=0.1)), _ref_ppo(0.1, 0.1, None), 0.3),
    ("dapo", DapoLoss(DapoConfig(clip_lower=0.15, clip_higher=0.28)), _ref_ppo(0.15, 0.28, None), 0.3),
    ("dapo-dual", DapoLoss(DapoConfig(clip_lower=0.2, clip_higher=0.28, delta=1.3)), _ref_ppo(0.2, 0.28, 1.3), 0.3),
    ("cispo", CispoLoss(CispoConfig(clip_higher=0.3)), _ref_cispo(0.3, None), 0.3),
    ("cispo-lower", CispoLoss(CispoConfig(clip_higher=0.3, clip_lower=0.2)), _ref_cispo(0.3, 0.2), 0.3),
    ("gspo", GspoLoss(GspoConfig(clip_lower=0.03, clip_higher=0.04)), _ref_gspo(0.03, 0.04), 0.15),
    ("gspo-paper", GspoLoss(GspoConfig()), _ref_gspo(3e-4, 4e-4), 0.15),
]


def _reference(inputs: LossInputs, token_fn: Callable) -> dict:
    """Per-token losses and gradients, per-sequence lists, and metrics, computed token by token."""
    toks = _tokens(inputs)
    by_seq: dict[int, list[float]] = {}
    for _, _, s, lp, olp, _ in toks:
        by_seq.setdefault(s, []).append(lp - olp)
    seq_ratio = {s: math.exp(sum(v) / len(v)) for s, v in by_seq.items()}
    rows = []
    for r, c, s, lp, olp, a in toks:
        loss, grad, ratio, low, high = token_fn(lp, olp, a, seq_ratio[s])
        rows.append({"rc": (r, c), "seq": s, "loss": loss, "grad": grad, "ratio": ratio, "low": low, "high": high})
    n = len(rows)
    mean = sum(t["ratio"] for t in rows) / n
    metrics = {
        "clip_frac_low": sum(t["low"] for t in rows) / n,
        "clip_frac_high": sum(t["high"] for t in rows) / n,
        "ratio_mean": mean,
        "ratio_var": sum((t["ratio"] - mean) ** 2 for t in rows) / n,
    }
    return {"tokens": rows, "metrics": metrics}


def _ref_aggregate(tokens: list[dict], mode: str) -> tuple[float, dict[tuple[int, int], float]]:
    """The scalar and each token's weight in it, computed from per-sequence lists."""
    seqs: dict[int, list[dict]] = {}
    for t in tokens:
        seqs.setdefault(t["seq"], []).append(t)
    if mode == "token-mean":
        weights = {t["rc"]: 1.0 / len(tokens) for t in tokens}
    elif mode == "seq-mean-token-mean":
        weights = {t["rc"]: 1.0 / (len(seqs) * len(members)) for members in seqs.values() for t in members}
    else:  # seq-mean-token-sum
        weights = {t["rc"]: 1.0 / len(seqs) for t in tokens}
    return sum(weights[t["rc"]] * t["loss"] for t in tokens), weights


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(("label", "loss", "token_fn", "noise"), CASES, ids=[c[0] for c in CASES])
def test_loss_matches_float64_reference(label: str, loss: object, token_fn: Callable, noise: float, seed: int) -> None:
    inputs, _ = _random_inputs(seed, noise)
    ref = _reference(inputs, token_fn)
    out = loss(inputs)  # type: ignore[operator]
    per_token = out.per_token_loss.detach()
    expected = torch.zeros_like(per_token)
    for t in ref["tokens"]:
        expected[t["rc"]] = t["loss"]
    torch.testing.assert_close(per_token, expected, rtol=0, atol=1e-10)  # exact zeros off the mask too
    for key, value in ref["metrics"].items():
        assert float(out.metrics[key]) == pytest.approx(value, abs=1e-10), key
    delta = getattr(loss.config, "delta", None)  # type: ignore[attr-defined]
    if delta is not None:  # dual clip: A < 0 and ratio > delta, counted plainly
        capped = sum(1 for *_, lp, olp, a in _tokens(inputs) if a < 0 and math.exp(lp - olp) > delta)
        assert capped > 0
        assert float(out.metrics["clip_frac_dual"]) == pytest.approx(capped / len(ref["tokens"]), abs=1e-12)
    if label != "gspo-paper":  # the random cases exercise both branches (the paper's tiny clip clips all)
        clipped = ref["metrics"]["clip_frac_low"] + ref["metrics"]["clip_frac_high"]
        assert 0 < clipped < 1, label


@pytest.mark.parametrize("mode", AGGREGATION_MODES)
@pytest.mark.parametrize(("label", "loss", "token_fn", "noise"), CASES, ids=[c[0] for c in CASES])
def test_aggregated_loss_and_gradient_match_reference(label: str, loss: object, token_fn: Callable, noise: float, mode: str) -> None:
    inputs, new = _random_inputs(3, noise)
    ref = _reference(inputs, token_fn)
    expected_value, weights = _ref_aggregate(ref["tokens"], mode)
    value = aggregate(loss(inputs).per_token_loss, inputs.mask, inputs.seq_ids, inputs.num_seqs, mode)  # type: ignore[operator, arg-type]
    # 1e-6 relative: the engine's aggregation weights are float32 (per-token values above are exact).
    assert float(value.detach()) == pytest.approx(expected_value, rel=1e-6, abs=1e-9)
    value.backward()
    expected_grad = torch.zeros_like(new)
    for t in ref["tokens"]:
        expected_grad[t["rc"]] = weights[t["rc"]] * t["grad"]
    torch.testing.assert_close(new.grad, expected_grad, rtol=1e-6, atol=1e-9)


def test_dr_grpo_with_constant_denominator() -> None:
    # Dr. GRPO's recommended setting: each sequence's token sum over a constant C (here 16), then
    # the mean over sequences -- no division by the sequence's own length.
    inputs, new = _random_inputs(7, 0.3)
    ref = _reference(inputs, _ref_ppo(0.2, 0.2, None))
    seqs = {t["seq"] for t in ref["tokens"]}
    expected = sum(t["loss"] for t in ref["tokens"]) / (16.0 * len(seqs))
    per_token = DrGrpoLoss()(inputs).per_token_loss
    value = aggregate(per_token, inputs.mask, inputs.seq_ids, inputs.num_seqs, "seq-mean-token-mean", 16.0)
    assert float(value.detach()) == pytest.approx(expected, rel=1e-6)
    value.backward()
    expected_grad = torch.zeros_like(new)
    for t in ref["tokens"]:
        expected_grad[t["rc"]] = t["grad"] / (16.0 * len(seqs))
    torch.testing.assert_close(new.grad, expected_grad, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("mode", AGGREGATION_MODES)
@pytest.mark.parametrize(
    "loss",
    [
        GrpoLoss(GrpoConfig(clip=0.2, delta=1.25)),
        DapoLoss(DapoConfig(delta=1.3)),
        DrGrpoLoss(),
        GspoLoss(GspoConfig(clip_lower=0.03, clip_higher=0.04)),
    ],
    ids=["grpo", "dapo", "dr_grpo", "gspo"],
)
def test_gradcheck_against_finite_differences(loss: object, mode: str) -> None:
    # The scalar is the objective itself for these losses, so autograd must agree with central
    # differences -- for gspo this checks that the GSPO-token form differentiates the sequence ratio.
    inputs, new = _random_inputs(4, 0.3 if not isinstance(loss, GspoLoss) else 0.15)

    def objective(logprobs: torch.Tensor) -> torch.Tensor:
        x = attrs.evolve(inputs, logprobs=logprobs)
        return aggregate(loss(x).per_token_loss, x.mask, x.seq_ids, x.num_seqs, mode)  # type: ignore[operator, arg-type]

    assert torch.autograd.gradcheck(objective, (new.detach().clone().requires_grad_(True),), eps=1e-7, atol=1e-6)


def test_gspo_shares_ratio_and_clip_within_a_sequence() -> None:
    inputs, _ = _random_inputs(5, 0.15)
    out = GspoLoss(GspoConfig(clip_lower=0.03, clip_higher=0.04))(inputs)
    for s in range(inputs.num_seqs):
        members = out.per_token_loss.detach()[inputs.mask & (inputs.seq_ids == s)]
        if members.numel():
            assert torch.allclose(members, members[0].expand_as(members), rtol=0, atol=1e-12)


def test_losses_ignore_garbage_off_the_mask() -> None:
    inputs, new = _random_inputs(6, 0.3)
    for loss in (GrpoLoss(), DrGrpoLoss(), CispoLoss(), GspoLoss(), DapoLoss(DapoConfig(delta=2.0))):
        poisoned = attrs.evolve(inputs, logprobs=torch.where(inputs.mask, new, torch.full_like(new, math.inf)))
        out = loss(poisoned)
        assert torch.isfinite(out.per_token_loss).all()
        out.per_token_loss.sum().backward()
        assert torch.isfinite(new.grad).all() and (new.grad[~inputs.mask] == 0).all()
        new.grad = None


# --- configs and registration -------------------------------------------------------------------


def test_configs_defaults_and_validation() -> None:
    assert (GrpoConfig().clip, GrpoConfig().delta) == (0.2, None)
    assert (DrGrpoConfig().clip, DrGrpoConfig().delta) == (0.2, None)
    assert (DapoConfig().clip_lower, DapoConfig().clip_higher, DapoConfig().delta) == (0.2, 0.28, None)
    assert (CispoConfig().clip_higher, CispoConfig().clip_lower) == (5.0, None)
    assert (GspoConfig().clip_lower, GspoConfig().clip_higher) == (3e-4, 4e-4)
    for make, field in [
        (lambda: GrpoConfig(clip=1.0), "clip"),
        (lambda: GrpoConfig(clip=-0.1), "clip"),
        (lambda: GrpoConfig(delta=1.0), "delta"),
        (lambda: DapoConfig(delta=0.5), "delta"),
        (lambda: DrGrpoConfig(delta=1.0), "delta"),
        (lambda: CispoConfig(clip_higher=-1.0), "clip_higher"),
        (lambda: CispoConfig(clip_lower=1.0), "clip_lower"),
        (lambda: GspoConfig(clip_lower=1.0), "clip_lower"),
        (lambda: GspoConfig(clip_higher=-1e-4), "clip_higher"),
    ]:
        with pytest.raises(ValueError, match=field):
            make()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        GspoConfig().clip_lower = 0.1  # type: ignore[misc]


def test_configs_structure_from_toml_tables() -> None:
    converter = cattrs.Converter()
    register_strict_hooks(converter)
    assert converter.structure({"clip": 0.1, "delta": 3}, GrpoConfig) == GrpoConfig(clip=0.1, delta=3.0)
    assert converter.structure({"clip_lower": 0.5}, CispoConfig) == CispoConfig(clip_lower=0.5)
    assert converter.structure({}, DrGrpoConfig) == DrGrpoConfig()


def test_losses_registered() -> None:
    from grpo_run.plugins import losses

    seen: list[type] = []
    losses.grpo_run_register_losses(seen.append)
    assert {cls.name for cls in seen} == {"grpo", "dapo", "dr_grpo", "cispo", "gspo"}


def test_choosing_dr_grpo_without_its_settings_is_an_error_naming_them(plugin_host) -> None:
    from grpo_run.core.config import ConfigError, parse_config

    base = {"task": {"name": "arithmetic"}, "verifiers": {"math": {}}, "loss": {"name": "dr_grpo"}}
    with pytest.raises(ConfigError) as err:
        parse_config(base, plugin_host.registry, "run.toml")
    [issue] = err.value.issues
    assert issue.path == "loss.name"
    assert issue.message == (
        'is "dr_grpo", which needs algorithm.advantage_normalization_type = "centered" (no division by the '
        "group std) and algorithm.loss_denominator = 32 (a constant such as rollout.response_length, not a "
        'per-sequence token count); without them it trains plain GRPO (use name = "grpo" for that)'
    )
    ok = {**base, "algorithm": {"advantage_normalization_type": "centered", "loss_denominator": 32}}
    assert parse_config(ok, plugin_host.registry).loss.name == "dr_grpo"
