"""The k1, k2 and low_var KL estimators (and k3) against float64 references and gradients."""

from __future__ import annotations

import math
import random

import attrs
import pytest
import torch

from grpo_run.plugins.kl.k1 import K1Config, K1KL
from grpo_run.plugins.kl.k2 import K2Config, K2KL
from grpo_run.plugins.kl.k3 import K3Config, K3KL
from grpo_run.plugins.kl.low_var import LowVarConfig, LowVarKL

F64 = torch.float64


def _clamp(x: float, bound: float) -> float:
    return max(-bound, min(bound, x))


# Plain references on d = logp - ref (after the d clamp) and their derivatives w.r.t. logp; the
# derivative is 0 wherever a clamp is active (d beyond the d clamp, or k3 beyond the value clamp).
def _ref_k1(d: float) -> tuple[float, float]:
    return d, 1.0


def _ref_k2(d: float) -> tuple[float, float]:
    return d * d / 2, d


def _ref_k3(d: float) -> tuple[float, float]:
    return math.exp(-d) - 1 + d, 1 - math.exp(-d)


def _ref_low_var(d: float, value_clamp: float = 10.0) -> tuple[float, float]:
    k3, grad = _ref_k3(d)
    return _clamp(k3, value_clamp), grad if abs(k3) < value_clamp else 0.0


CASES = [
    ("k1", K1KL(K1Config(clamp=20.0)), _ref_k1, 20.0),
    ("k2", K2KL(K2Config(clamp=20.0)), _ref_k2, 20.0),
    ("k3", K3KL(K3Config(clamp=20.0)), _ref_k3, 20.0),
    ("low_var", LowVarKL(LowVarConfig(clamp=20.0)), _ref_low_var, 20.0),
    ("k1-clamp3", K1KL(K1Config(clamp=3.0)), _ref_k1, 3.0),
    ("k2-clamp3", K2KL(K2Config(clamp=3.0)), _ref_k2, 3.0),
    ("low_var-clamp3", LowVarKL(LowVarConfig(clamp=3.0)), _ref_low_var, 3.0),
]


def _random_logprobs(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    # d spread over [-4, 4] plus a few far outliers (|d| ~ 25) that hit every clamp.
    rng = random.Random(seed)
    ref = [[-rng.uniform(0.01, 5.0) for _ in range(9)] for _ in range(3)]
    d = [[rng.uniform(-4.0, 4.0) for _ in range(9)] for _ in range(3)]
    d[0][0], d[1][1], d[2][2] = -25.0, 25.0, -2.7  # -2.7: k3 = e^2.7 - 3.7 = 11.18 > 10 (low_var's cap)
    logp = [[r + x for r, x in zip(rr, dd, strict=True)] for rr, dd in zip(ref, d, strict=True)]
    return torch.tensor(logp, dtype=F64, requires_grad=True), torch.tensor(ref, dtype=F64)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(("label", "kl", "ref_fn", "clamp"), CASES, ids=[c[0] for c in CASES])
def test_kl_matches_float64_reference(label: str, kl: object, ref_fn: object, clamp: float, seed: int) -> None:
    logp, ref = _random_logprobs(seed)
    value = kl(logp, ref)  # type: ignore[operator]
    assert value.shape == logp.shape and value.dtype == F64
    value.sum().backward()
    expected, expected_grad = torch.zeros_like(ref), torch.zeros_like(ref)
    for r in range(ref.shape[0]):
        for c in range(ref.shape[1]):
            raw = float(logp[r, c].detach()) - float(ref[r, c])
            d = _clamp(raw, clamp)
            v, g = ref_fn(d)  # type: ignore[operator]
            expected[r, c] = v
            expected_grad[r, c] = g if abs(raw) < clamp else 0.0
    torch.testing.assert_close(value.detach(), expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(logp.grad, expected_grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kl", [K1KL(), K2KL(), K3KL(), LowVarKL()], ids=["k1", "k2", "k3", "low_var"])
def test_kl_gradcheck(kl: object) -> None:
    # Inside every clamp the estimators are smooth: autograd must match finite differences.
    gen = torch.Generator().manual_seed(0)
    ref = -torch.rand(2, 5, dtype=F64, generator=gen) * 3
    logp = (ref + (torch.rand(2, 5, dtype=F64, generator=gen) * 4 - 2)).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: kl(x, ref), (logp,))  # type: ignore[operator]


def test_hand_computed_values() -> None:
    # d = log 2: k1 = 0.693147, k2 = 0.240227, k3 = low_var = 0.5 - 1 + 0.693147 = 0.193147
    # d = -3:    k1 = -3,       k2 = 4.5,      k3 = e^3 - 1 - 3 = 16.085537, low_var = 10 (capped)
    logp = torch.tensor([[math.log(0.5), -4.0]], dtype=F64)
    ref = torch.tensor([[math.log(0.25), -1.0]], dtype=F64)
    l2 = math.log(2)
    torch.testing.assert_close(K1KL()(logp, ref), torch.tensor([[l2, -3.0]], dtype=F64))
    torch.testing.assert_close(K2KL()(logp, ref), torch.tensor([[l2 * l2 / 2, 4.5]], dtype=F64))
    torch.testing.assert_close(K3KL()(logp, ref), torch.tensor([[l2 - 0.5, math.exp(3) - 4]], dtype=F64))
    torch.testing.assert_close(LowVarKL()(logp, ref), torch.tensor([[l2 - 0.5, 10.0]], dtype=F64))
    # A value clamp of 20 lets the d = -3 token through unchanged.
    torch.testing.assert_close(
        LowVarKL(LowVarConfig(value_clamp=20.0))(logp, ref), torch.tensor([[l2 - 0.5, math.exp(3) - 4]], dtype=F64)
    )


def test_extreme_inputs_stay_finite() -> None:
    d = torch.linspace(-1e4, 1e4, 201, dtype=torch.float32, requires_grad=True)
    for kl in (K1KL(), K2KL(), K3KL(), LowVarKL()):
        kl(d, torch.zeros_like(d)).sum().backward()
        assert torch.isfinite(d.grad).all()
        d.grad = None
    assert (LowVarKL()(d, torch.zeros_like(d)).detach().abs() <= 10).all()


def test_configs_validated() -> None:
    assert K1Config().clamp == K2Config().clamp == LowVarConfig().clamp == 20.0
    assert LowVarConfig().value_clamp == 10.0
    for make, field in [
        (lambda: K1Config(clamp=0.0), "clamp"),
        (lambda: K2Config(clamp=-1.0), "clamp"),
        (lambda: LowVarConfig(clamp=0.0), "clamp"),
        (lambda: LowVarConfig(value_clamp=0.0), "value_clamp"),
    ]:
        with pytest.raises(ValueError, match=field):
            make()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        LowVarConfig().value_clamp = 3.0  # type: ignore[misc]


def test_kl_estimators_registered() -> None:
    from grpo_run.plugins import kl

    seen: list[type] = []
    kl.grpo_run_register_kl_estimators(seen.append)
    assert {cls.name for cls in seen} == {"k1", "k2", "k3", "low_var"}
