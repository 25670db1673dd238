"""``check_loss`` and ``check_kl_estimator``: the per-token pieces of the learner's objective.

Inputs are random but seeded, shaped like the learner's packed rows: each row holds two sequences
(a prompt part off the mask, then completion tokens on it) and padding (``seq_ids == -1``).
"""

from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING, Any

from grpo_run.testing._common import Reporter, check_class, default_config, short

if TYPE_CHECKING:
    import torch

    from grpo_run.core.plugins.types import LossInputs

CONSTANT_DENOMINATOR = 8.0
"""The constant ``algorithm.loss_denominator`` the loss check aggregates with, besides ``"token"``."""
POISON = (math.nan, math.inf, -math.inf)
"""Values written into ``logprobs``/``old_logprobs`` off the mask (prompt tokens, padding)."""


def random_loss_inputs(seed: int = 0, rows: int = 3, length: int = 16, *, empty_mask: bool = False,
                       poison: bool = False) -> LossInputs:
    """Seeded :class:`~grpo_run.LossInputs` of packed rows (float32, ``logprobs`` a leaf with grad).

    Row ``r`` holds sequences ``2r`` and ``2r + 1``: 2-3 prompt tokens (off the mask) then 2-4
    completion tokens each, then padding. Advantages are per sequence; ``old_logprobs`` are
    ``logprobs`` plus noise of scale 0.1. ``empty_mask``: no token is on the mask. ``poison``:
    positions off the mask hold NaN, inf and -inf in ``logprobs`` and ``old_logprobs``.
    """
    import torch

    from grpo_run.core.plugins.types import LossInputs

    gen = torch.Generator().manual_seed(seed)
    mask = torch.zeros(rows, length, dtype=torch.bool)
    seq_ids = torch.full((rows, length), -1, dtype=torch.long)
    for r in range(rows):
        pos = 0
        for seq in (2 * r, 2 * r + 1):
            prompt = int(torch.randint(2, 4, (1,), generator=gen))
            completion = int(torch.randint(2, 5, (1,), generator=gen))
            seq_ids[r, pos:pos + prompt + completion] = seq
            mask[r, pos + prompt:pos + prompt + completion] = True
            pos += prompt + completion
    advantages = torch.randn(2 * rows, generator=gen)[seq_ids.clamp(min=0)]  # [R, L], per sequence
    logprobs = -torch.rand(rows, length, generator=gen) * 3.0
    old = logprobs + 0.1 * torch.randn(rows, length, generator=gen)
    if empty_mask:
        mask[:] = False
    if poison:
        values = torch.tensor(POISON).repeat(rows * length // len(POISON) + 1)[: rows * length].reshape(rows, length)
        logprobs = torch.where(mask, logprobs, values)
        old = torch.where(mask, old, values.flip(-1))
    return LossInputs(logprobs=logprobs.requires_grad_(True), old_logprobs=old, advantages=advantages, mask=mask,
                      seq_ids=seq_ids, num_seqs=2 * rows)


def check_loss(cls: type, config: Any = None, *, seed: int = 0) -> None:
    """Check a loss class; :class:`AssertionError` naming the check and the value if it fails.

    On seeded random :func:`random_loss_inputs`:

    * **output**: a :class:`~grpo_run.LossOutput` whose ``per_token_loss`` has the inputs'
      ``[rows, length]`` shape, is finite on the mask and exactly 0 off it; every metric is a
      finite scalar (a number or a one-element tensor).
    * **aggregation**: for every mode of ``algorithm.loss_aggregation`` (``token-mean``,
      ``seq-mean-token-mean``, ``seq-mean-token-sum``) and for the ``"token"`` and a constant
      (``8.0``) denominator, the aggregated loss is finite and its gradient reaches ``logprobs``:
      finite everywhere, not all zero on the mask, exactly 0 off it.
    * **poisoned padding**: with NaN/inf/-inf in ``logprobs`` and ``old_logprobs`` off the mask,
      ``per_token_loss`` is unchanged (same values on the mask, 0 off it) and gradients stay
      finite and 0 off the mask.
    * **all-false mask**: ``per_token_loss`` is all 0, every aggregate is 0 with all-zero
      finite gradients, metrics are finite.
    """
    report = Reporter("loss", cls)
    check_class(cls, "loss", report)
    config = default_config(cls, config, report)
    try:
        loss = cls(config)
    except Exception as exc:
        raise report.fail("build", f"{cls.__qualname__}(config) raised {type(exc).__name__}: {exc}") from exc
    clean = _per_token(loss, random_loss_inputs(seed), "random inputs", report)
    for case, kwargs in (("random inputs", {}), ("poisoned padding", {"poison": True}),
                         ("all-false mask", {"empty_mask": True})):
        for mode, denominator in _aggregations():
            inputs = random_loss_inputs(seed, **kwargs)
            per_token = _per_token(loss, inputs, case, report)
            if case == "poisoned padding" and not bool((per_token.detach() == clean.detach()).all()):
                diff = (per_token.detach() - clean.detach()).abs().nan_to_num(math.inf).max().item()
                raise report.fail(case, "per_token_loss changed when only off-mask logprobs changed "
                                        f"(max diff {diff:g})")
            _check_aggregate(per_token, inputs, mode, denominator, case, report)


def _aggregations() -> list[tuple[str, Any]]:
    from grpo_run.core.learner.aggregation import AGGREGATION_MODES

    return [(mode, denominator) for mode in AGGREGATION_MODES for denominator in ("token", CONSTANT_DENOMINATOR)]


def _per_token(loss: Any, inputs: LossInputs, case: str, report: Reporter) -> torch.Tensor:
    import torch

    from grpo_run.core.plugins.types import LossOutput

    try:
        out = loss(inputs)
    except Exception as exc:
        raise report.fail(case, f"loss(inputs) raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(out, LossOutput):
        raise report.fail(case, f"returned {short(out)}, expected a LossOutput")
    per_token, mask = out.per_token_loss, inputs.mask
    if not isinstance(per_token, torch.Tensor) or per_token.shape != mask.shape:
        got = tuple(per_token.shape) if isinstance(per_token, torch.Tensor) else short(per_token)
        raise report.fail(case, f"per_token_loss has shape {got}, expected {tuple(mask.shape)}")
    off = per_token.detach()[~mask]
    if bool((off != 0).any()) or bool(off.isnan().any()):
        bad = off[(off != 0) | off.isnan()]
        raise report.fail(case, f"per_token_loss is not 0 off the mask: {bad.numel()} positions, "
                                f"e.g. {bad[0].item()!r}")
    on = per_token.detach()[mask]
    if not bool(on.isfinite().all()):
        raise report.fail(case, f"per_token_loss is not finite on the mask: {on[~on.isfinite()][0].item()!r}")
    for key, value in out.metrics.items():
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            value = value.item()
        if not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise report.fail(case, f"metric {key!r} is {short(value)}, expected a finite scalar")
    return per_token


def _check_aggregate(per_token: torch.Tensor, inputs: LossInputs, mode: str, denominator: Any, case: str,
                     report: Reporter) -> None:
    from grpo_run.core.learner.aggregation import aggregate

    how = f"{case}, {mode} / {denominator}"
    mask = inputs.mask
    scalar = aggregate(per_token, mask, inputs.seq_ids, inputs.num_seqs, mode, denominator)  # type: ignore[arg-type]
    if not bool(scalar.isfinite()):
        raise report.fail(how, f"the aggregated loss is {scalar.item()!r}")
    if not scalar.requires_grad:
        raise report.fail(how, "the loss does not depend on logprobs (no gradient)")
    scalar.backward()
    grad = inputs.logprobs.grad
    if grad is None or not bool(grad.isfinite().all()):
        raise report.fail(how, f"the gradient of logprobs is {'missing' if grad is None else 'not finite'}")
    if bool((grad[~mask] != 0).any()):
        raise report.fail(how, f"the gradient of logprobs is not 0 off the mask: {grad[~mask].abs().max().item()!r}")
    empty = not bool(mask.any())
    if empty and scalar.item() != 0.0:
        raise report.fail(how, f"the aggregated loss is {scalar.item()!r}, expected 0")
    if not empty and not bool((grad[mask] != 0).any()):
        raise report.fail(how, "the gradient does not reach logprobs: it is 0 on every masked token")


def check_kl_estimator(cls: type, config: Any = None, *, seed: int = 0, zero_at_equal: bool = True) -> None:
    """Check a KL estimator class; :class:`AssertionError` naming the check and the value if it fails.

    On seeded ``[3, 16]`` log-probs (policy in ``[-6, 0]``, reference = policy + N(0, 1) noise,
    at most 0), and on ``[1, 5]`` ones:

    * **shape**: the per-token estimate has the inputs' shape;
    * **finite**: every value is finite;
    * **gradient**: ``estimate.sum()`` has a finite gradient on ``logprobs``, not all zero;
    * **zero at equal** (``zero_at_equal``, true for the standard estimators ``k1``, ``k2``,
      ``k3``): with ``ref_logprobs == logprobs`` every value is 0 (within 1e-6).
    """
    import torch

    report = Reporter("kl", cls)
    check_class(cls, "kl", report)
    config = default_config(cls, config, report)
    try:
        kl = cls(config)
    except Exception as exc:
        raise report.fail("build", f"{cls.__qualname__}(config) raised {type(exc).__name__}: {exc}") from exc
    gen = torch.Generator().manual_seed(seed)
    for shape in ((3, 16), (1, 5)):
        logprobs = (-torch.rand(shape, generator=gen) * 6.0).requires_grad_(True)
        ref = (logprobs.detach() + torch.randn(shape, generator=gen)).clamp(max=0.0)
        out = _estimate(kl, logprobs, ref, report)
        if not bool(out.isfinite().all()):
            raise report.fail("finite", f"estimate {out[~out.isfinite()][0].item()!r} for shape {shape}")
        if not out.requires_grad:
            raise report.fail("gradient", "the estimate does not depend on logprobs (no gradient)")
        out.sum().backward()
        grad = logprobs.grad
        if grad is None or not bool(grad.isfinite().all()) or not bool((grad != 0).any()):
            raise report.fail("gradient", f"the gradient of logprobs is {short(grad)}")
        if zero_at_equal:
            same = _estimate(kl, logprobs.detach().clone(), logprobs.detach().clone(), report).detach()
            if bool((same.abs() > 1e-6).any()):
                raise report.fail("zero at equal", f"estimate {same.abs().max().item()!r} where logprobs == "
                                                   "ref_logprobs (pass zero_at_equal=False for an estimator that "
                                                   "is not 0 there)")


def _estimate(kl: Any, logprobs: torch.Tensor, ref: torch.Tensor, report: Reporter) -> torch.Tensor:
    import torch

    try:
        out = kl(logprobs, ref)
    except Exception as exc:
        raise report.fail("call", f"kl(logprobs, ref_logprobs) raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(out, torch.Tensor) or out.shape != logprobs.shape:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else short(out)
        raise report.fail("shape", f"estimate has shape {got}, expected {tuple(logprobs.shape)}")
    return out
