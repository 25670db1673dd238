"""Shared pieces of the learner tests: a one-layer Llama with a 24-token vocabulary, random
sequences and a learner spec."""

from __future__ import annotations

import random

import attrs
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from grpo_run.core.config.schema import AlgorithmSection, KLSlot, OptimSection
from grpo_run.core.learner.spec import ComponentSpec, LearnerSpec, ModelSpec
from grpo_run.core.rollout.packing import SequenceToPack
from grpo_run.plugins.losses.dapo import DapoLoss

VOCAB = 24


def tiny_model(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0, eos_token_id=1,
    )
    return LlamaForCausalLM(config).float()


def make_seqs(n: int = 8, seed: int = 0, **overrides) -> list[SequenceToPack]:
    rng = random.Random(seed)
    seqs = []
    for i in range(n):
        completion = [rng.randrange(2, VOCAB) for _ in range(rng.randint(1, 7))]
        seqs.append(
            SequenceToPack(
                prompt_ids=[rng.randrange(2, VOCAB) for _ in range(rng.randint(1, 4))],
                completion_ids=completion,
                advantage=rng.gauss(0.0, 1.0),
                engine_logprobs=[-rng.uniform(2.0, 4.0) for _ in completion],
                seq_id=i,
            )
        )
    return [attrs.evolve(s, **overrides) for s in seqs]


def make_spec(**alg) -> LearnerSpec:
    """A learner spec for these tests (the model and loss are handed to the Learner directly)."""
    kl = alg.pop("kl", KLSlot())
    return LearnerSpec(
        model=ModelSpec(path="<in memory>"),
        algorithm=AlgorithmSection(pack_length=16, **alg),
        optim=OptimSection(lr=1e-2, max_grad_norm=1e6),
        kl=kl,
        loss=ComponentSpec(DapoLoss, DapoLoss.Config()),
        kl_estimator=None,
        temperature=1.0,
        total_steps=100,
        pad_token_id=0,
    )


def params_of(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def mini_batches(seqs: list[SequenceToPack], num_mini_batches: int, pack_length: int, pad_token_id: int = 0,
                 *, rank: int = 0, world_size: int = 1, max_tokens: int = 0) -> list:
    """The packed mini-batches a learner (rank ``rank`` of ``world_size``) trains on for ``seqs``."""
    from grpo_run.core.learner.micro import pack_mini_batch
    from grpo_run.core.learner.strategies.base import Strategy
    from grpo_run.core.learner.strategies.sharding import rank_shares

    shares = (Strategy().mini_batch_shares(seqs, num_mini_batches) if world_size == 1
              else rank_shares(seqs, num_mini_batches, rank=rank, world_size=world_size))
    return [pack_mini_batch(share, pack_length, pad_token_id, max_tokens) for share in shares]
