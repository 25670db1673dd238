"""The k3 KL estimator against hand-computed values."""

from __future__ import annotations

import math

import attrs
import pytest
import torch

from grpo_run.plugins.kl.k3 import K3Config, K3KL


def test_k3_hand_computed() -> None:
    # d = logp - ref: k3 = exp(-d) - 1 + d.
    #   d = 0      -> 1 - 1 + 0 = 0
    #   d = log 2  -> 0.5 - 1 + 0.693147 = 0.193147
    #   d = -log 2 -> 2 - 1 - 0.693147 = 0.306853
    logp = torch.tensor([[-1.0, math.log(0.5), math.log(0.25)]], dtype=torch.float64)
    ref = torch.tensor([[-1.0, math.log(0.25), math.log(0.5)]], dtype=torch.float64)
    kl = K3KL(K3Config())(logp, ref)
    expected = torch.tensor([[0.0, 0.5 - 1 + math.log(2), 2 - 1 - math.log(2)]], dtype=torch.float64)
    torch.testing.assert_close(kl, expected, rtol=0, atol=1e-12)


def test_k3_clamp_and_gradient() -> None:
    # d = -100 clamps to -5: exp(5) - 1 - 5 = 142.413159; the clamp cuts the gradient there.
    # d = 1 (unclamped): value exp(-1) - 1 + 1 = 0.367879, d/dlogp = 1 - exp(-1) = 0.632121.
    logp = torch.tensor([[-100.0, 0.0]], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[0.0, -1.0]], dtype=torch.float64)
    kl = K3KL(K3Config(clamp=5.0))(logp, ref)
    torch.testing.assert_close(kl, torch.tensor([[math.exp(5) - 6, math.exp(-1)]], dtype=torch.float64))
    kl.sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[0.0, 1 - math.exp(-1)]], dtype=torch.float64))


def test_k3_non_negative_and_finite() -> None:
    d = torch.linspace(-60, 60, 101)
    kl = K3KL()(d, torch.zeros_like(d))
    assert torch.isfinite(kl).all() and (kl >= 0).all()


def test_k3_config_validated() -> None:
    assert K3Config().clamp == 20.0
    with pytest.raises(ValueError, match="clamp"):
        K3Config(clamp=0.0)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        K3Config().clamp = 3.0  # type: ignore[misc]


def test_k3_registered() -> None:
    from grpo_run.plugins import kl

    seen: list[type] = []
    kl.grpo_run_register_kl_estimators(seen.append)
    assert K3KL in seen and K3KL.name == "k3"
