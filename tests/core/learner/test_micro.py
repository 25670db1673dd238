"""Micro-batches under a token budget take exactly the step of one forward per mini-batch: the
same losses and the same gradient at every optimizer step (fp32, <= 1e-6), in every aggregation
mode and denominator, with several mini-batches and epochs, a KL term, off-policy corrections and
entropy; and the budget bounds what one forward holds."""

from __future__ import annotations

import attrs
import pytest
import torch

from support.learner import make_seqs, make_spec, tiny_model

from grpo_run.core.config.schema import KLSlot
from grpo_run.core.learner.learner import Learner
from grpo_run.core.learner.micro import micro_groups, pack_mini_batch, row_groups
from grpo_run.core.rollout.packing import SequenceToPack
from grpo_run.core.learner.strategies.base import Strategy
from grpo_run.plugins.kl.k3 import K3KL
from grpo_run.plugins.losses.dapo import DapoLoss

# The recording strategy steps the weights itself, so torch sees the schedule step without an optimizer step.
pytestmark = pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")


class RecordingStrategy(Strategy):
    """One process, keeping the gradient of every optimizer step. It steps by plain SGD: AdamW's
    first steps move every weight by +-lr whatever its gradient's size, so float rounding in a
    gradient of 1e-9 would flip whole updates and hide what the later steps compare."""

    def __init__(self) -> None:
        self.gradients: list[list[torch.Tensor]] = []
        self.forward_tokens: list[int] = []

    def step(self) -> tuple[float, bool]:
        self.gradients.append([p.grad.detach().clone() for p in self.policy.parameters()])
        norm = self._clip_gradients()
        with torch.no_grad():
            for p in self.policy.parameters():
                p.add_(p.grad, alpha=-0.05 / max(1.0, norm))  # a step of at most 0.05
        return norm, True


def _run(budget: int, steps: int = 2, **algorithm) -> tuple[RecordingStrategy, list[dict[str, float]]]:
    kl = algorithm.pop("kl", KLSlot(beta=0.1, reference="frozen"))
    spec = attrs.evolve(make_spec(kl=kl, log_entropy=True, **algorithm), forward_tokens=budget, logprob_forward_tokens=budget)
    strategy = RecordingStrategy()
    policy = tiny_model()
    forwards: list[int] = []
    policy.register_forward_pre_hook(lambda _m, _a, kwargs: forwards.append(int(kwargs["input_ids"].numel())), with_kwargs=True)
    reference = tiny_model().eval().requires_grad_(False) if kl.beta > 0 else None
    learner = Learner(spec, policy, reference, DapoLoss(DapoLoss.Config()), K3KL(K3KL.Config()) if kl.beta > 0 else None, strategy=strategy)
    metrics = [learner.train_step(make_seqs(13, seed=seed)) for seed in range(steps)]
    strategy.forward_tokens = forwards
    return strategy, metrics


CASES = [
    {"loss_aggregation": "token-mean"},
    {"loss_aggregation": "token-mean", "loss_denominator": 7.0},
    {"loss_aggregation": "seq-mean-token-mean"},
    {"loss_aggregation": "seq-mean-token-mean", "loss_denominator": 5.0},
    {"loss_aggregation": "seq-mean-token-sum"},
    {"loss_aggregation": "seq-mean-token-mean", "kl": KLSlot(beta=0.2, reference="frozen", placement="reward"),
     "mismatch_correction": "sequence-truncate"},
    {"loss_aggregation": "token-mean", "use_engine_logprobs_as_old": True, "share_prompts": False},
]


@pytest.mark.parametrize("algorithm", CASES, ids=lambda a: "-".join(f"{v}" for v in a.values()))
def test_micro_batches_take_the_one_forward_step(algorithm) -> None:
    algorithm = {"num_mini_batches": 2, "num_epochs": 2, **algorithm}
    whole, whole_metrics = _run(0, **dict(algorithm))
    split, split_metrics = _run(16, **dict(algorithm))  # 16 = pack_length: one row per forward
    assert len(split.forward_tokens) > 2 * len(whole.forward_tokens)  # really split
    assert max(split.forward_tokens) <= 16 < max(whole.forward_tokens)
    assert len(split.gradients) == len(whole.gradients) == 2 * 2 * 2  # steps x epochs x mini-batches
    for step, (a, b) in enumerate(zip(split.gradients, whole.gradients)):
        for ga, gb in zip(a, b):
            assert torch.allclose(ga, gb, atol=1e-6, rtol=1e-5), step
        assert max(float(g.abs().max()) for g in b) > 1e-3  # a real gradient
    for a, b in zip(split_metrics, whole_metrics):
        for key in ("loss/policy", "loss/total", "optim/grad_norm", "policy/entropy"):
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-7), key
        assert a["perf/micro_batches"] > 1 == b["perf/micro_batches"]


def test_row_groups_fit_the_budget_and_balance_tokens() -> None:
    assert row_groups([500, 500, 480, 120], 0) == [[0, 1, 2, 3]]
    assert row_groups([500, 500, 480, 120], 1024) == [[0, 2], [1, 3]]
    assert row_groups([500, 500, 480, 120], 1600) == [[0, 1, 2, 3]]
    assert row_groups([900, 100], 512) == [[0], [1]]  # a row over the budget is a forward of its own
    assert row_groups([], 100) == []


def _group(prompt: list[int], n: int, completion: int, first_id: int) -> list[SequenceToPack]:
    return [SequenceToPack(prompt, [5] * completion, 1.0, [-1.0] * completion, seq_id=first_id + i) for i in range(n)]


def test_packed_micro_batches_keep_prompt_groups_together_and_merge_under_a_larger_budget() -> None:
    # Four groups of 4 samples (30 tokens each, 480 in all) under 128 tokens per forward: each
    # group is one micro-batch, so its prompt is still computed once per forward.
    seqs = [s for g in range(4) for s in _group([10 + g] * 6, 4, 24, 4 * g)]
    batch = pack_mini_batch(seqs, 64, 0, max_tokens=128)
    assert batch.num_real_tokens == 480 and batch.num_seqs == 16
    tokens = batch.row_tokens()
    groups = micro_groups(batch, 128)
    assert len(groups) == 4 and all(sum(tokens[r] for r in g) <= 128 for g in groups)
    for rows in groups:
        part = batch.select_rows(rows)
        assert len({int(part.input_ids[r, s]) for r, s, _ in part.spans}) == 1  # one prompt per forward
    assert micro_groups(batch, 256) == [groups[0] + groups[1], groups[2] + groups[3]]  # the no-grad budget
    assert micro_groups(batch, 0) == [list(range(batch.num_rows))]
    assert pack_mini_batch(seqs, 64, 0, max_tokens=480).micro_rows is None  # fits: one forward
