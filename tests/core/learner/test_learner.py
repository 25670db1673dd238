"""The learner: loss aggregation over a whole rollout batch, pi_old across several updates,
truncated-completion masking, entropy, KL placement and the Polyak reference.

A one-layer Llama with a 24-token vocabulary keeps every test well under a second.
"""

from __future__ import annotations

import copy
import math
import random

import attrs
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from support.learner import VOCAB, make_seqs, make_spec, params_of, tiny_model, mini_batches

from grpo_run import LossInputs, LossOutput
from grpo_run.core.config.schema import AlgorithmSection, KLSlot, OptimSection
from support.entropy import token_entropy
from grpo_run.core.learner.learner import Learner
from grpo_run.core.learner.logprobs import block_causal_mask, packed_token_logprobs
from grpo_run.core.learner.aggregation import LossNormaliser, aggregate
from grpo_run.core.rollout.packing import SequenceToPack, pack_sequences
from grpo_run.plugins.kl.k3 import K3KL
from grpo_run.plugins.losses.dapo import DapoLoss

class SpyLoss:
    """DAPO, recording the inputs of every call."""

    name = "spy"
    Config = DapoLoss.Config

    def __init__(self) -> None:
        self.inner = DapoLoss()
        self.calls: list[LossInputs] = []

    def __call__(self, inputs: LossInputs) -> LossOutput:
        self.calls.append(attrs.evolve(inputs, logprobs=inputs.logprobs.detach().clone()))
        return self.inner(inputs)


# ---------------------------------------------------------------------------------------------
# Aggregation over the whole rollout batch
# ---------------------------------------------------------------------------------------------


def _reference_objective(seqs, losses_by_seq, mode, denominator):
    """Batch-level objective in float64, from per-sequence lists of per-token losses."""
    kept = [(s, l) for s, l in zip(seqs, losses_by_seq) if s.loss_mask and l]
    if mode == "token-mean":
        total = sum(sum(l) for _, l in kept)
        return total / (denominator if denominator != "token" else sum(len(l) for _, l in kept))
    if mode == "seq-mean-token-mean":
        return sum(sum(l) / (denominator if denominator != "token" else len(l)) for _, l in kept) / len(kept)
    return sum(sum(l) for _, l in kept) / len(kept)


@pytest.mark.parametrize(
    ("mode", "denominator"),
    [("token-mean", "token"), ("token-mean", 7.0), ("seq-mean-token-mean", "token"),
     ("seq-mean-token-mean", 5.0), ("seq-mean-token-sum", "token")],
)
def test_mini_batch_losses_add_up_to_m_times_the_batch_objective(mode, denominator) -> None:
    # Random per-token losses on 3 token-balanced mini-batches, one sequence masked out. Every
    # token must weigh the same in whichever mini-batch it lands: the M mini-batch losses add up
    # to M x the batch-level objective, a constant denominator included (C stands where the
    # batch's token count stands, so it gets the same M scale; it used to add up to 1x).
    seqs = make_seqs(11, seed=3)
    seqs[4] = attrs.evolve(seqs[4], loss_mask=False)
    batches = mini_batches(seqs, 3, 16, 0)
    gen = torch.Generator().manual_seed(0)
    normaliser = LossNormaliser.for_batches([(b.completion_mask, b.seq_ids, b.num_seqs) for b in batches], mode, denominator)
    losses_by_seq: list[list[float]] = [[] for _ in seqs]
    total = 0.0
    for b in batches:
        per_token = torch.randn(b.input_ids.shape, generator=gen, dtype=torch.float64)
        per_token[~b.completion_mask] = math.inf  # off-mask garbage must not leak
        total += float(normaliser.reduce(per_token, b.completion_mask, b.seq_ids, b.num_seqs))
        for local, (row, start, end) in enumerate(b.spans):
            source = b.source_seq_ids[local]
            m = b.completion_mask[row, start:end]
            losses_by_seq[source] = per_token[row, start:end][m].tolist()
    expected = _reference_objective(seqs, losses_by_seq, mode, denominator)
    assert total == pytest.approx(len(batches) * expected, rel=1e-12, abs=1e-12)


def test_one_batch_normaliser_is_the_plain_mean() -> None:
    # Hand-computed: tokens 1, 2, 3 (seq 0) and 4 (seq 1): token-mean 10/4 = 2.5,
    # seq-mean-token-mean (2 + 4)/2 = 3, seq-mean-token-sum (6 + 4)/2 = 5, token-mean / 8 = 1.25.
    loss = torch.tensor([[0.0, 1.0, 2.0, 3.0, 0.0, 4.0]])
    mask = torch.tensor([[False, True, True, True, False, True]])
    seq = torch.tensor([[0, 0, 0, 0, 1, 1]])
    assert float(aggregate(loss, mask, seq, 2, "token-mean")) == 2.5
    assert float(aggregate(loss, mask, seq, 2, "seq-mean-token-mean")) == 3.0
    assert float(aggregate(loss, mask, seq, 2, "seq-mean-token-sum")) == 5.0
    assert float(aggregate(loss, mask, seq, 2, "token-mean", 8.0)) == 1.25


def test_normaliser_counts_go_through_reduce_sum() -> None:
    # Two ranks holding the same shard: the all-reduced counts double and world_size = 2 doubles
    # the scale, so the weights are those of one process.
    seqs = make_seqs(6)
    b = pack_sequences(seqs, 16, 0)
    items = [(b.completion_mask, b.seq_ids, b.num_seqs)]
    seen = []

    def reduce_sum(counts: torch.Tensor) -> torch.Tensor:
        seen.append(counts.clone())
        return counts * 2

    local = LossNormaliser.for_batches(items, "token-mean")
    dist = LossNormaliser.for_batches(items, "token-mean", world_size=2, reduce_sum=reduce_sum)
    assert seen[0].tolist() == [float(b.completion_mask.sum()), 6.0]
    assert dist.num_tokens == 2 * local.num_tokens and dist.scale == 2.0
    torch.testing.assert_close(dist.token_weights(*items[0]), local.token_weights(*items[0]), rtol=0, atol=0)


ALL_AGGREGATIONS = [
    ("token-mean", "token"),
    ("token-mean", 7.0),
    ("seq-mean-token-mean", "token"),
    ("seq-mean-token-mean", 5.0),
    ("seq-mean-token-sum", "token"),
]


def _weights_by_sequence(normaliser: LossNormaliser, batches) -> dict[int, list[float]]:
    """Each source sequence's per-token loss weights, wherever it was packed."""
    out: dict[int, list[float]] = {}
    for b in batches:
        weights = normaliser.token_weights(b.completion_mask, b.seq_ids, b.num_seqs, torch.float64)
        for local, (row, start, end) in enumerate(b.spans):
            if local < len(b.source_seq_ids):
                out[b.source_seq_ids[local]] = weights[row, start:end][b.completion_mask[row, start:end]].tolist()
    return out


@pytest.mark.parametrize(("mode", "denominator"), ALL_AGGREGATIONS)
def test_ranks_weights_averaged_over_ranks_are_one_process_weights(mode, denominator) -> None:
    # DDP averages the ranks' gradients, so each token's weight on its rank, divided by the world
    # size, must be its weight in one process: for every mode and denominator (a constant C
    # carries the same M x world_size scale as a count; without it the average was 1 / (2C)).
    seqs = make_seqs(12, seed=5)
    seqs[3] = attrs.evolve(seqs[3], loss_mask=False)
    world = 2
    single = mini_batches(seqs, 2, 16, 0)
    one = LossNormaliser.for_batches([(b.completion_mask, b.seq_ids, b.num_seqs) for b in single], mode, denominator)
    want = _weights_by_sequence(one, single)
    shares = [mini_batches(seqs, 2, 16, 0, rank=r, world_size=world) for r in range(world)]
    items = [[(b.completion_mask, b.seq_ids, b.num_seqs) for b in share] for share in shares]
    local = [LossNormaliser.for_batches(i, mode, denominator) for i in items]
    total = torch.tensor([sum(n.num_tokens for n in local), sum(n.num_seqs for n in local)], dtype=torch.float64)
    got: dict[int, list[float]] = {}
    for share, item in zip(shares, items):
        ranked = LossNormaliser.for_batches(item, mode, denominator, world_size=world, reduce_sum=lambda c: total)
        got.update({k: [w / world for w in v] for k, v in _weights_by_sequence(ranked, share).items()})
    assert sorted(got) == sorted(want) == list(range(12))
    for seq_id, weights in want.items():
        assert got[seq_id] == pytest.approx(weights, rel=1e-12), seq_id


# ---------------------------------------------------------------------------------------------
# pi_old
# ---------------------------------------------------------------------------------------------


def test_single_update_ratio_is_exactly_one() -> None:
    spy = SpyLoss()
    learner = Learner(make_spec(), tiny_model(), None, spy, None)
    metrics = learner.train_step(make_seqs())
    (call,) = spy.calls
    assert torch.equal(call.logprobs, call.old_logprobs)
    assert metrics["loss/ratio_mean"] == 1.0 and metrics["loss/clip_frac_low"] == metrics["loss/clip_frac_high"] == 0.0


def test_several_updates_use_the_pre_update_policy_as_old() -> None:
    seqs = make_seqs(10)
    model = tiny_model()
    initial = copy.deepcopy(model)
    spy = SpyLoss()
    learner = Learner(make_spec(num_mini_batches=2, num_epochs=2), model, None, spy, None)
    learner.train_step(seqs)
    assert len(spy.calls) == 4  # 2 epochs x 2 mini-batches
    batches = mini_batches(seqs, 2, 16, 0)
    with torch.no_grad():  # the learner computes log-probs of the loss tokens only (0 elsewhere)
        expected = [packed_token_logprobs(initial, b) * b.completion_mask for b in batches]
    for i, call in enumerate(spy.calls):
        torch.testing.assert_close(call.old_logprobs, expected[i % 2], rtol=0, atol=1e-6)
    # The first update sees the unchanged policy; every later one a moved policy.
    torch.testing.assert_close(spy.calls[0].logprobs, expected[0], rtol=0, atol=1e-6)
    for call in spy.calls[1:]:
        m = call.mask
        assert (call.logprobs[m] - call.old_logprobs[m]).abs().max() > 1e-3


def test_shared_prompts_take_the_same_step_with_fewer_tokens() -> None:
    # 3 groups of 4 samples sharing a 3-token prompt: one step with algorithm.share_prompts on and
    # off moves the weights alike, and the sharing run reports the prompt tokens it did not recompute.
    rng = random.Random(5)
    seqs = []
    for _ in range(3):
        prompt = [rng.randrange(2, VOCAB) for _ in range(3)]
        for _ in range(4):
            completion = [rng.randrange(2, VOCAB) for _ in range(rng.randint(1, 6))]
            seqs.append(SequenceToPack(prompt, completion, rng.gauss(0.0, 1.0), [-3.0] * len(completion), seq_id=len(seqs)))
    results = {}
    for share in (True, False):
        model = tiny_model()
        metrics = Learner(make_spec(share_prompts=share), model, None, DapoLoss(), None).train_step(seqs)
        results[share] = (metrics, params_of(model))
    assert results[True][0]["packing/shared_prompt_tokens"] == 3 * 3 * 3  # groups x later samples x prompt
    assert results[False][0]["packing/shared_prompt_tokens"] == 0
    assert results[True][0]["loss/policy"] == pytest.approx(results[False][0]["loss/policy"], abs=1e-6)
    for a, b in zip(results[True][1], results[False][1]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_engine_logprobs_as_old() -> None:
    seqs = make_seqs()
    spy = SpyLoss()
    Learner(make_spec(use_engine_logprobs_as_old=True), tiny_model(), None, spy, None).train_step(seqs)
    (call,) = spy.calls
    batch = pack_sequences(seqs, 16, 0)
    assert torch.equal(call.old_logprobs, batch.engine_logprobs)


# ---------------------------------------------------------------------------------------------
# Truncated completions masked out of the loss
# ---------------------------------------------------------------------------------------------


def test_masked_completion_gets_no_gradient_and_does_not_change_normalisation() -> None:
    # Sequences 1 and 5 were truncated (rollout set loss_mask=False): training with them packed
    # but masked must equal training without them, and their tokens get zero gradient.
    seqs = make_seqs(8, seed=1)
    masked = [attrs.evolve(s, loss_mask=False) if s.seq_id in (1, 5) else s for s in seqs]
    without = [s for s in seqs if s.seq_id not in (1, 5)]
    for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"):
        a, b = tiny_model(), tiny_model()
        la = Learner(make_spec(loss_aggregation=mode), a, None, DapoLoss(), None)
        lb = Learner(make_spec(loss_aggregation=mode), b, None, DapoLoss(), None)
        ma, mb = la.train_step(masked), lb.train_step(without)
        assert ma["loss/policy"] == pytest.approx(mb["loss/policy"], rel=1e-5)
        for pa, pb in zip(a.parameters(), b.parameters()):
            torch.testing.assert_close(pa, pb, rtol=0, atol=1e-6)

    batch = pack_sequences(masked, 16, 0)
    logprobs = packed_token_logprobs(tiny_model(), batch).detach().requires_grad_(True)
    out = DapoLoss()(LossInputs(logprobs, logprobs.detach() - 0.1, batch.advantages, batch.completion_mask,
                                batch.seq_ids, batch.num_seqs))
    aggregate(out.per_token_loss, batch.completion_mask, batch.seq_ids, batch.num_seqs).backward()
    for local in (1, 5):
        row, start, end = batch.spans[local]
        assert (logprobs.grad[row, start:end] == 0).all()
    assert (logprobs.grad[batch.completion_mask] != 0).all()


# ---------------------------------------------------------------------------------------------
# Metrics: entropy, grad norm
# ---------------------------------------------------------------------------------------------


def test_token_entropy_matches_float64_reference() -> None:
    logits = torch.randn(2, 5, VOCAB, generator=torch.Generator().manual_seed(0)) * 3
    got = token_entropy(logits, temperature=0.7)
    logp = torch.log_softmax(logits.double() / 0.7, dim=-1)
    ref = -(logp.exp() * logp).sum(-1)  # [2, 5]: entropy of the distribution at t
    assert got[:, 0].eq(0).all()
    torch.testing.assert_close(got[:, 1:].double(), ref[:, :-1], rtol=0, atol=1e-5)


def test_entropy_and_grad_norm_metrics() -> None:
    seqs = make_seqs()
    model = tiny_model()
    batch = pack_sequences(seqs, 16, 0)
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, position_ids=batch.position_ids, use_cache=False,
                       attention_mask=block_causal_mask(batch.seq_ids)).logits
    expected = token_entropy(logits)[batch.completion_mask].double().mean()
    metrics = Learner(make_spec(log_entropy=True), model, None, DapoLoss(), None).train_step(seqs)
    assert metrics["policy/entropy"] == pytest.approx(float(expected), abs=1e-5)
    assert metrics["optim/grad_norm"] > 0
    assert "policy/entropy" not in Learner(make_spec(), tiny_model(), None, DapoLoss(), None).train_step(seqs)


# ---------------------------------------------------------------------------------------------
# KL placement and the reference policy
# ---------------------------------------------------------------------------------------------


def test_kl_in_loss_adds_beta_times_kl() -> None:
    seqs = make_seqs()
    cfg = make_spec(kl=KLSlot(beta=0.5))
    metrics = Learner(cfg, tiny_model(0), tiny_model(1), DapoLoss(), K3KL()).train_step(seqs)
    assert metrics["loss/kl"] > 0
    assert metrics["loss/total"] == pytest.approx(metrics["loss/policy"] + 0.5 * metrics["loss/kl"], rel=1e-6)


def test_kl_in_reward_is_subtracted_from_the_sequence_advantage() -> None:
    seqs = make_seqs()
    policy, reference = tiny_model(0), tiny_model(1)
    batch = pack_sequences(seqs, 16, 0)
    with torch.no_grad():
        lp, ref = packed_token_logprobs(policy, batch), packed_token_logprobs(reference, batch)
    d = (lp - ref).double()
    k3 = torch.exp(-d) - 1 + d
    spy = SpyLoss()
    cfg = make_spec(kl=KLSlot(beta=0.3, placement="reward"))
    metrics = Learner(cfg, policy, reference, spy, K3KL()).train_step(seqs)
    (call,) = spy.calls
    assert "loss/kl" not in metrics and metrics["loss/total"] == metrics["loss/policy"]
    for local, (row, start, end) in enumerate(batch.spans):
        m = batch.completion_mask[row, start:end]
        seq_kl = float(k3[row, start:end][m].sum())
        expected = seqs[local].advantage - 0.3 * seq_kl
        got = call.advantages[row, start:end][m]
        torch.testing.assert_close(got.double(), torch.full_like(got, expected).double(), rtol=0, atol=1e-5)


def test_polyak_reference_update_every_n_steps() -> None:
    seqs = make_seqs()
    policy, reference = tiny_model(0), tiny_model(1)
    cfg = make_spec(kl=KLSlot(beta=0.1, reference="polyak", ref_policy_update_freq=2, alpha=0.25))
    learner = Learner(cfg, policy, reference, DapoLoss(), K3KL())
    ref0 = params_of(reference)
    learner.train_step(seqs)
    for r, r0 in zip(reference.parameters(), ref0):  # step 1: not due
        assert torch.equal(r, r0)
    learner.train_step(seqs)
    theta = params_of(policy)
    for r, r0, t in zip(reference.parameters(), ref0, theta):  # step 2: ref = 0.25 theta + 0.75 ref
        torch.testing.assert_close(r.double(), 0.25 * t.double() + 0.75 * r0.double(), rtol=0, atol=1e-7)
    assert "reference" in learner.state_dict()


def test_frozen_reference_never_moves_and_is_not_checkpointed() -> None:
    policy, reference = tiny_model(0), tiny_model(1)
    learner = Learner(make_spec(kl=KLSlot(beta=0.1)), policy, reference, DapoLoss(), K3KL())
    ref0 = params_of(reference)
    learner.train_step(make_seqs())
    learner.skip_step()
    assert all(torch.equal(r, r0) for r, r0 in zip(reference.parameters(), ref0))
    assert learner.steps == 2 and "reference" not in learner.state_dict()
