"""The learner's guard against non-finite updates: a mini-batch whose loss or gradient is NaN or
inf is not applied (weights and optimizer state unchanged), counted in ``optim/skipped_updates``,
and the LR schedule still advances; the next finite mini-batch trains as usual. Over two ranks
(ddp; fsdp2 and DeepSpeed ZeRO-2/3 are heavy): the ranks agree, and the run equals one process that
skipped the same update."""

from __future__ import annotations

import math

import attrs
import pytest
import torch

from support.learner import make_seqs, make_spec, params_of, tiny_model
from support.poison_loss import PoisonedLoss
from support.strategies import WEIGHT_ATOL, learner_section, max_difference, rollout_batches, save_tiny_model, strategy_spec

from grpo_run import LossInputs, LossOutput
from grpo_run.core.learner.learner import Learner, build_learner, nan_gradient_unless_finite
from grpo_run.core.learner.spec import ComponentSpec
from grpo_run.core.placement.local import start_local_ranks


def _learner(calls: tuple[int, ...], value: float = math.nan, add: bool = False, **alg) -> Learner:
    """A learner whose loss is multiplied by ``value`` (or has it added) on its ``calls`` (1-based)."""
    config = PoisonedLoss.Config(calls, value=value, add=add)
    return Learner(make_spec(**alg), tiny_model(), None, PoisonedLoss(config), None)


def test_nan_gradient_unless_finite_keeps_a_finite_loss_exactly() -> None:
    x = torch.tensor([0.5, -2.0], requires_grad=True)
    loss = (x * x).sum()
    kept = nan_gradient_unless_finite(loss)
    assert kept.item() == loss.item()
    kept.backward()
    assert torch.equal(x.grad, 2 * x.detach())
    # f + inf has the finite gradient of f: made NaN, so the strategy drops it
    y = torch.tensor([0.5], requires_grad=True)
    nan_gradient_unless_finite((y * 3).sum() + math.inf).backward()
    assert torch.isnan(y.grad).all()


@pytest.mark.parametrize(("bad", "add"), [(math.nan, False), (math.inf, False), (math.nan, True), (-math.inf, True)])
def test_a_non_finite_loss_is_not_applied_and_is_counted(bad: float, add: bool) -> None:
    # multiplied: the gradient is not finite either; added: only the loss is (f + inf)
    learner = _learner((1,), bad, add)
    before = params_of(learner.policy)
    metrics = learner.train_step(make_seqs(6))
    assert metrics["optim/skipped_updates"] == 1.0
    after = params_of(learner.policy)
    assert all(torch.equal(a, b) for a, b in zip(before, after))  # not touched at all
    assert learner.optimizer.state == {}  # AdamW never stepped: no moments, no step count
    assert all(p.grad is None for p in learner.policy.parameters())
    assert learner.steps == 1 and learner.scheduler.last_epoch == 1  # the schedule still advances
    # the next step is finite and trains
    metrics = learner.train_step(make_seqs(6, seed=1))
    assert metrics["optim/skipped_updates"] == 0.0 and math.isfinite(metrics["optim/grad_norm"])
    moved = params_of(learner.policy)
    assert any(not torch.equal(a, b) for a, b in zip(before, moved))
    assert all(torch.isfinite(v).all() for v in moved)


def test_only_the_poisoned_mini_batch_is_skipped() -> None:
    # 2 mini-batches x 2 epochs = 4 updates; the second is poisoned
    learner = _learner((2,), num_mini_batches=2, num_epochs=2)
    metrics = learner.train_step(make_seqs(8))
    assert metrics["optim/skipped_updates"] == 1.0
    assert learner.scheduler.last_epoch == 4
    assert all(torch.isfinite(v).all() for v in params_of(learner.policy))
    assert next(iter(learner.optimizer.state.values()))["step"].item() == 3  # three updates applied


def test_a_non_finite_gradient_from_a_finite_loss_is_not_applied() -> None:
    # The loss is finite, its gradient is not: sqrt at 0 has an infinite derivative.
    class SqrtAtZero:
        def __call__(self, inputs: LossInputs) -> LossOutput:
            per_token = torch.sqrt((inputs.logprobs - inputs.logprobs.detach()) ** 2 * 0)
            return LossOutput(per_token_loss=per_token, metrics={})

    learner = Learner(make_spec(), tiny_model(), None, SqrtAtZero(), None)
    before = params_of(learner.policy)
    metrics = learner.train_step(make_seqs(6))
    assert math.isfinite(metrics["loss/total"]) and not math.isfinite(metrics["optim/grad_norm"])
    assert metrics["optim/skipped_updates"] == 1.0
    assert all(torch.equal(a, b) for a, b in zip(before, params_of(learner.policy)))


@pytest.mark.slow  # two learner processes: ~20 s on 2 busy cores
@pytest.mark.parametrize(("strategy", "stage"), [
    ("ddp", None),
    pytest.param("fsdp2", None, marks=pytest.mark.heavy),
    pytest.param("deepspeed", 2, marks=pytest.mark.heavy),
    pytest.param("deepspeed", 3, marks=pytest.mark.heavy),
])
def test_ranks_skip_together_like_one_process(tmp_path, strategy, stage) -> None:
    # Rank 0's loss is NaN on its first call only; rank 1's is finite. Both ranks must skip that
    # update, and end where one process that skipped it ends.
    if strategy == "deepspeed":
        pytest.importorskip("deepspeed")
    model_dir = save_tiny_model(tmp_path / "model")
    spec = strategy_spec(model_dir)
    poisoned = ComponentSpec(PoisonedLoss, PoisonedLoss.Config(calls=(1,), rank="0"))
    spec = attrs.evolve(spec, loss=poisoned)
    one = build_learner(attrs.evolve(spec, loss=ComponentSpec(PoisonedLoss, PoisonedLoss.Config(calls=(1,)))))
    want = [one.train_step(batch) for batch in rollout_batches()]
    group = start_local_ranks(spec, learner_section(strategy, stage), seed=1)
    try:
        got = [group.train_step(batch) for batch in rollout_batches()]
        snapshot = group.weights_snapshot()
    finally:
        group.close()
    assert [m["optim/skipped_updates"] for m in got] == [m["optim/skipped_updates"] for m in want] == [1.0, 0.0, 0.0]
    assert all(torch.isfinite(v).all() for v in snapshot.values())
    assert 0 < max_difference(snapshot, one.weights_snapshot()) < WEIGHT_ATOL
