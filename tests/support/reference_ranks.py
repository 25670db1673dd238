"""Learner ranks that answer with their reference policy's log-probs and what they hold of it: the
sharded-reference tests compare those with a whole reference computed in the test process."""

from __future__ import annotations

import functools
from concurrent.futures import wait
from contextlib import nullcontext
from pathlib import Path

import attrs
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from support.learner import VOCAB
from support.strategies import learner_section

from grpo_run.core.config.schema import AlgorithmSection, KLSlot, OptimSection
from grpo_run.core.learner.logprobs import completion_logprobs
from grpo_run.core.learner.spec import ComponentSpec, LearnerSpec, ModelSpec
from grpo_run.core.learner.strategies.held import held_bytes
from grpo_run.core.placement.flat import decode_sequences
from grpo_run.core.placement.learner_group import RankedLearnerGroup
from grpo_run.core.placement.learner_rank import LearnerRank, RankSetup
from grpo_run.core.placement.local import free_port
from grpo_run.core.placement.processes import ProcessWorker
from grpo_run.core.rollout.packing import SequenceToPack, pack_sequences
from grpo_run.plugins.kl.k3 import K3KL
from grpo_run.plugins.losses.dapo import DapoLoss

CALL_TIMEOUT_S = 300.0


def wide_model(seed: int = 0) -> LlamaForCausalLM:
    """Two layers whose MLP weights (64 x 2048 = 131,072 elements) are over ZeRO-3's default
    ``stage3_param_persistence_threshold`` (1e5): those are partitioned over the ranks, while
    the norms and the attention weights (64 x 64) stay gathered. fp32, 1.4 M parameters."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=2048, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, max_position_embeddings=64, pad_token_id=0, eos_token_id=1,
    )
    return LlamaForCausalLM(config).float()


def save_wide_model(directory: Path) -> Path:
    wide_model().save_pretrained(directory)
    return directory


def reference_spec(model_dir: Path, *, kl: KLSlot, autocast: str = "none") -> LearnerSpec:
    """One mini-batch, one epoch: a step is one update, then (``polyak``) one Polyak move."""
    return LearnerSpec(
        model=ModelSpec(path=str(model_dir), autocast=autocast),
        algorithm=AlgorithmSection(pack_length=16),
        optim=OptimSection(lr=1e-2, max_grad_norm=1.0),
        kl=kl,
        loss=ComponentSpec(DapoLoss, DapoLoss.Config()),
        kl_estimator=ComponentSpec(K3KL, K3KL.Config()),
        temperature=1.0,
        total_steps=10,
        pad_token_id=0,
    )


def reference_logprobs(model: torch.nn.Module, seqs: list[SequenceToPack], spec: LearnerSpec) -> torch.Tensor:
    """The log-probs ``[R, L]`` of ``seqs``'s completions under ``model``, as the learner computes
    them: packed, no grad, under the spec's autocast."""
    device = next(model.parameters()).device
    batch = pack_sequences(seqs, spec.algorithm.pack_length, spec.pad_token_id).to(device)
    low = spec.model.autocast_dtype
    region = torch.autocast(device.type, dtype=low) if low is not None else nullcontext()
    with torch.no_grad(), region:
        return completion_logprobs(model, batch, temperature=spec.temperature)[0]


class ReferenceRank(LearnerRank):
    """A learner rank that also answers with its reference's log-probs and held bytes."""

    def reference_logprobs(self, encoded) -> torch.Tensor:  # type: ignore[no-untyped-def]
        return reference_logprobs(self.learner.reference, decode_sequences(encoded), self.setup.spec).cpu()

    def reference_held(self) -> tuple[int, str]:
        """Bytes held of the reference, and the dtype its weights are in."""
        reference = self.learner.reference
        return held_bytes(reference), str(next(reference.parameters()).dtype)


def start_reference_ranks(
    spec: LearnerSpec, strategy: str, stage: int | None = None, *, backend: str = "gloo"
) -> RankedLearnerGroup:
    """Two :class:`ReferenceRank` processes (over ``backend``; on CUDA rank i uses GPU i), started
    like ``start_local_ranks``'s."""
    learner = attrs.evolve(learner_section(strategy, stage), dist_backend=backend)
    base = RankSetup(spec, learner, rank=0, world_size=2, init_method=f"tcp://127.0.0.1:{free_port()}", threads=1)
    workers = [ProcessWorker(f"learner rank {rank}",
                             functools.partial(ReferenceRank, attrs.evolve(base, rank=rank, local_rank=rank)))
               for rank in range(2)]
    group = RankedLearnerGroup(workers)
    try:
        for worker in workers:
            worker.start()
        group.start(base.init_method)
    except BaseException:
        for worker in workers:
            worker.kill()
        raise
    return group


def on_every_rank(group: RankedLearnerGroup, method: str, *args) -> list:  # type: ignore[no-untyped-def]
    """``method(*args)`` on every rank at once (they meet in collectives): each rank's answer."""
    futures = [worker.submit(method, *args) for worker in group.workers]
    wait(futures, timeout=CALL_TIMEOUT_S)
    return [future.result(timeout=0) for future in futures]
