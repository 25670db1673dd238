"""The loss and KL-estimator checks catch broken components, with messages naming the check."""

from __future__ import annotations

import shutil

import attrs
import pytest

from grpo_run import (
    LossOutput,
    NoConfig,
)
from grpo_run.testing import (
    check_kl_estimator,
    check_loss,
)

HAVE_BWRAP = shutil.which("bwrap") is not None
FAST = 0.5
"""Scorer time limit for this module's own (instant) verifiers."""



# =============================================================================================
# Losses and KL estimators that break the contract
# =============================================================================================


class GoodLoss:
    """``-ratio x A`` on the mask (REINFORCE with importance ratio), 0 elsewhere."""

    name = "good-loss"
    Config = NoConfig

    def __init__(self, config: NoConfig) -> None:
        self.config = config

    def __call__(self, inputs):
        import torch

        diff = torch.where(inputs.mask, inputs.logprobs - inputs.old_logprobs, torch.zeros_like(inputs.logprobs))
        loss = -torch.exp(diff) * inputs.advantages
        return LossOutput(per_token_loss=torch.where(inputs.mask, loss, torch.zeros_like(loss)),
                          metrics={"ratio_mean": torch.exp(diff).mean(), "tokens": float(inputs.mask.sum())})


class LeakyLoss(GoodLoss):
    name = "leaky"

    def __call__(self, inputs):
        return LossOutput(per_token_loss=-(inputs.logprobs - inputs.old_logprobs) * inputs.advantages)


class MultipliedMaskLoss(GoodLoss):
    """Masks by multiplying: NaN x 0 is NaN, so poisoned padding leaks."""

    name = "multiplied-mask"

    def __call__(self, inputs):
        ratio = (inputs.logprobs - inputs.old_logprobs).exp()
        return LossOutput(per_token_loss=-ratio * inputs.advantages * inputs.mask)


class LateMaskLoss(GoodLoss):
    """Masks after ``exp``: the forward value is right, but inf padding turns the gradient into NaN."""

    name = "late-mask"

    def __call__(self, inputs):
        import torch

        loss = -(inputs.logprobs - inputs.old_logprobs).exp() * inputs.advantages
        return LossOutput(per_token_loss=torch.where(inputs.mask, loss, torch.zeros_like(loss)))


class DetachedLoss(GoodLoss):
    name = "detached"

    def __call__(self, inputs):
        return super().__call__(attrs.evolve(inputs, logprobs=inputs.logprobs.detach()))


class PerMaskMeanLoss(GoodLoss):
    """Divides by the number of masked tokens itself: 0 / 0 on an empty mask."""

    name = "per-mask-mean"

    def __call__(self, inputs):
        return LossOutput(per_token_loss=super().__call__(inputs).per_token_loss / inputs.mask.sum())


class VectorMetricLoss(GoodLoss):
    name = "vector-metric"

    def __call__(self, inputs):
        out = super().__call__(inputs)
        return LossOutput(per_token_loss=out.per_token_loss, metrics={"ratio": inputs.logprobs.detach()[0, :2]})


class PaddingGradientLoss(GoodLoss):
    """Adds a tiny term over every position, padding included: gradients leak off the mask."""

    name = "padding-gradient"

    def __call__(self, inputs):
        import torch

        out = super().__call__(inputs)
        leak = 1e-3 * torch.where(inputs.logprobs.isfinite(), inputs.logprobs, torch.zeros_like(inputs.logprobs)).mean()
        per_token = torch.where(inputs.mask, out.per_token_loss + leak, torch.zeros_like(out.per_token_loss))
        return LossOutput(per_token_loss=per_token)


def test_good_loss_passes() -> None:
    check_loss(GoodLoss)


@pytest.mark.parametrize(
    ("cls", "message"),
    [
        (LeakyLoss, r"^loss 'leaky': random inputs: per_token_loss is not 0 off the mask: \d+ positions, e\.g\. "),
        (MultipliedMaskLoss, r"^loss 'multiplied-mask': poisoned padding: per_token_loss is not 0 off the mask: "
                             r"\d+ positions, e\.g\. nan$"),
        (LateMaskLoss, r"^loss 'late-mask': poisoned padding, token-mean / token: the gradient of logprobs is not "
                       r"finite$"),
        (DetachedLoss, r"^loss 'detached': random inputs, token-mean / token: the loss does not depend on logprobs"),
        (PerMaskMeanLoss, r"^loss 'per-mask-mean': all-false mask: per_token_loss is not 0 off the mask: 48 "
                          r"positions, e\.g\. nan$"),
        (VectorMetricLoss, r"^loss 'vector-metric': random inputs: metric 'ratio' is tensor\(\[.*\]\), expected a "
                           r"finite scalar$"),
        (PaddingGradientLoss, r"^loss 'padding-gradient': random inputs, token-mean / token: the gradient of logprobs "
                              r"is not 0 off the mask"),
    ],
)
def test_broken_loss_fails(cls: type, message: str) -> None:
    with pytest.raises(AssertionError, match=message):
        check_loss(cls)


class GoodKL:
    name = "good-kl"
    Config = NoConfig

    def __init__(self, config: NoConfig) -> None:
        self.config = config

    def __call__(self, logprobs, ref_logprobs):
        d = logprobs - ref_logprobs
        return 0.5 * d * d


class ExpKL(GoodKL):
    """``exp(d)``: finite and differentiable, but 1 (not 0) where the policies agree."""

    name = "exp-kl"

    def __call__(self, logprobs, ref_logprobs):
        return (logprobs - ref_logprobs).exp()


class SummedKL(GoodKL):
    name = "summed-kl"

    def __call__(self, logprobs, ref_logprobs):
        return super().__call__(logprobs, ref_logprobs).sum(-1)


class DetachedKL(GoodKL):
    name = "detached-kl"

    def __call__(self, logprobs, ref_logprobs):
        return super().__call__(logprobs.detach(), ref_logprobs)


class OverflowingKL(GoodKL):
    name = "overflowing-kl"

    def __call__(self, logprobs, ref_logprobs):
        return (100.0 * (ref_logprobs - logprobs)).exp() - 1.0 + 100.0 * (logprobs - ref_logprobs)


def test_kl_estimators() -> None:
    check_kl_estimator(GoodKL)
    check_kl_estimator(ExpKL, zero_at_equal=False)
    with pytest.raises(AssertionError, match=r"^kl 'exp-kl': zero at equal: estimate 1\.0 where logprobs == "
                                             r"ref_logprobs"):
        check_kl_estimator(ExpKL)
    with pytest.raises(AssertionError, match=r"^kl 'summed-kl': shape: estimate has shape \(3,\), expected \(3, 16\)$"):
        check_kl_estimator(SummedKL)
    with pytest.raises(AssertionError, match=r"^kl 'detached-kl': gradient: the estimate does not depend on logprobs"):
        check_kl_estimator(DetachedKL)
    with pytest.raises(AssertionError, match=r"^kl 'overflowing-kl': finite: estimate inf for shape \(3, 16\)$"):
        check_kl_estimator(OverflowingKL)


