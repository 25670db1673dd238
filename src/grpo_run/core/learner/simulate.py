"""The learner step run on fake tensors: what it would hold in memory, with no weights and no GPU.

:func:`simulate_step` builds the policy (and reference) from a model config alone, inside a
:class:`~grpo_run.core.memory.fake.FakeDevice`, and runs the project's own
:meth:`~grpo_run.core.learner.learner.Learner.train_step` on a rollout batch of the planned shape:
packing into mini- and micro-batches under the token budgets, prompt sharing, gradient
checkpointing, the chunked output layer, the loss and KL plugins, AdamW. Every floating-point
storage is counted as it is created and freed, and the peak is read over ``steps`` steps (the
second one holds the optimizer state from its start).

For a CUDA target the pieces that differ on that device stand in: the fused varlen attention
kernel (the tensors it keeps: ``out`` and a float32 log-sum-exp per head and token, and in the
backward the three input gradients and a float32 accumulator for the query's) and AdamW's
multi-tensor (``foreach``) step, the CUDA default, whose temporaries are as large as the trainable
weights. Autocast uses the CPU's op lists, which cast matmuls as CUDA's do.

A sharded learner (``fsdp2``, and DeepSpeed ZeRO-3, which shards the same things) is simulated as
its rank 0: torch's ``fake`` process group stands in for the other ranks (collectives return at
once, an all-gather's output is allocated as a real one is), so ``fully_shard`` shards the weights,
gradients and optimizer state and gathers each unit for its forward and backward as it would on
the GPUs. Other data-parallel strategies are simulated as one process.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from typing import Any

import attrs
import torch

from grpo_run.core.learner import attention
from grpo_run.core.learner.learner import Learner
from grpo_run.core.learner.lora import AdapterDisabledView, wrap_policy
from grpo_run.core.learner import logprobs
from grpo_run.core.compat import enable_activation_checkpointing, torch_varlen_attention
from grpo_run.core.config.processes import LearnerSection
from grpo_run.core.learner.reference import ReferenceLoader
from grpo_run.core.learner.spec import LearnerSpec
from grpo_run.core.learner.strategies.base import Strategy
from grpo_run.core.learner.strategies.fsdp2 import FSDP2Strategy
from grpo_run.core.memory.fake import FakeDevice
from grpo_run.core.memory.shapes import RolloutShape
from grpo_run.core.rollout.packing import SequenceToPack


@attrs.frozen
class SimulatedStep:
    """What :func:`simulate_step` counted (bytes)."""

    peak: int
    """The largest live total at any moment of any step."""
    steady: int
    """Live after the last step: weights, gradients' storage if kept, optimizer state, reference."""
    micro_batches: float
    """``perf/micro_batches`` of the last step."""
    seconds: float
    """Wall time of the simulation."""
    rank: str = "one process"
    """What was simulated: one process, or rank 0 of a sharded learner."""


def simulate_step(
    spec: LearnerSpec,
    config: Any,
    rollout: RolloutShape,
    *,
    device: str = "cuda",
    steps: int = 2,
    full_logits: bool = False,
    learner: LearnerSection | None = None,
) -> SimulatedStep:
    """Run ``steps`` learner steps of ``spec`` for a model of ``config`` (a transformers config)
    on a rollout batch of ``rollout``'s shape, simulated for ``device`` (``"cuda"`` or ``"cpu"``).

    ``full_logits``: the output layer computes real ``[tokens, V]`` logits (as a model that
    post-processes its logits does) instead of the chunked log-probs. ``learner``: the run's
    ``[learner]``; a sharded one is simulated as its rank 0 (see the module docstring)."""
    start = time.perf_counter()
    seqs = rollout_sequences(rollout, vocab_size=int(config.vocab_size))
    world = learner.num_learners if learner is not None and sharded(learner) else 1
    fake = FakeDevice()
    with fake, cuda_kernels(device == "cuda"), _fake_ranks(world) as strategy:
        policy = learner_model(config, spec)
        reference = None
        if spec.model.lora is not None:
            policy = wrap_policy(policy, spec.model.lora)
            reference = AdapterDisabledView(policy) if spec.uses_reference else None
        elif spec.uses_reference:
            reference = _SimulatedReference(spec, config)
        kl = spec.kl_estimator.build() if spec.kl_estimator is not None else None
        trainer = Learner(spec, policy, reference, spec.loss.build(), kl, strategy=strategy)
        if device == "cuda":
            for group in trainer.optimizer.param_groups:
                group["foreach"] = True
        fake.counter.reset_peak()  # the steps' peak: a sharded model is loaded before it is sharded
        metrics: dict[str, float] = {}
        with full_logits_of(policy) if full_logits else nullcontext():
            for _ in range(steps):
                metrics = trainer.train_step(seqs)
        return SimulatedStep(
            peak=fake.counter.peak, steady=fake.counter.live, micro_batches=metrics.get("perf/micro_batches", 0.0),
            seconds=time.perf_counter() - start, rank=f"0 of {world}, sharded" if world > 1 else "one process",
        )


@attrs.frozen
class _SimulatedReference(ReferenceLoader):
    """The reference built from the model's config (no weights), in its dtype, where the strategy loads it."""

    config: Any = None

    def load(self, device: str | None = None) -> torch.nn.Module:
        spec = attrs.evolve(self.spec, model=attrs.evolve(self.spec.model, dtype=self.spec.reference_dtype))
        return learner_model(self.config, spec, checkpointing=False).eval().requires_grad_(False)


def sharded(learner: LearnerSection) -> bool:
    """The strategy shards the weights (FSDP2, ZeRO-3) and has ranks to shard them over."""
    return learner.num_learners > 1 and (learner.strategy == "fsdp2" or (learner.strategy == "deepspeed" and learner.stage == 3))


class _SimulatedRank(FSDP2Strategy):
    """Rank 0 of a fake process group: its metrics are its own (no other rank sends any)."""

    def combine_metrics(self, metrics: dict[str, float], totals: Mapping[str, float]) -> dict[str, float]:
        return metrics


@contextmanager
def _fake_ranks(world: int) -> Iterator[Strategy | None]:
    """Rank 0 of ``world`` fake ranks while open (``None``, the one-process strategy, for one)."""
    if world <= 1:
        yield None
        return
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise RuntimeError("a sharded learner step cannot be simulated inside an initialised process group")
    dist.init_process_group("fake", rank=0, world_size=world, store=FakeStore())
    try:
        yield _SimulatedRank(0, world, torch.device("cpu"))
    finally:
        dist.destroy_process_group()


def learner_model(config: Any, spec: LearnerSpec, *, checkpointing: bool = True) -> Any:
    """The model of ``config`` as the learner builds it (its dtype, attention, and checkpointing
    as the spec says unless ``checkpointing`` is off: a reference), on the device the caller's
    mode gives it (fake tensors here); LoRA is the caller's."""
    from transformers import AutoModelForCausalLM

    policy = AutoModelForCausalLM.from_config(
        config, dtype=spec.model.torch_dtype, attn_implementation=spec.model.attn_implementation
    )
    if checkpointing and spec.model.gradient_checkpointing:
        enable_activation_checkpointing(policy)
    return policy


def rollout_sequences(rollout: RolloutShape, vocab_size: int, seed: int = 0) -> list[SequenceToPack]:
    """A rollout batch of the planned shape: ``prompts`` groups of ``samples`` sequences, each with
    the group's prompt of ``prompt_tokens`` and ``response_tokens`` completion tokens (the
    longest the config allows: what memory must be planned for)."""
    rng = random.Random(seed)
    out = []
    for p in range(rollout.prompts):
        prompt = [rng.randrange(1, vocab_size) for _ in range(rollout.prompt_tokens)]
        for s in range(rollout.samples):
            completion = [rng.randrange(1, vocab_size) for _ in range(rollout.response_tokens)]
            out.append(SequenceToPack(prompt, completion, rng.gauss(0.0, 1.0), [-1.0] * len(completion),
                                      seq_id=p * rollout.samples + s))
    return out


@contextmanager
def full_logits_of(model: Any) -> Iterator[None]:
    """While open, ``model`` takes the path of a model that post-processes its logits: real
    ``[tokens, V]`` logits, log-softmax over chunks of positions."""
    kind = type(attention.hf_model(model))
    added = kind not in logprobs._LOGITS_CHANGED
    logprobs._LOGITS_CHANGED.add(kind)
    try:
        yield
    finally:
        if added:
            logprobs._LOGITS_CHANGED.discard(kind)


@contextmanager
def cuda_kernels(on: bool) -> Iterator[None]:
    """While open (``on``): the fused varlen attention kernel is the stand-in below, wherever the
    real one would run (half precision; torch's ``varlen_attn`` or flash-attn available)."""
    if not on:
        yield
        return
    real = attention.fused_varlen_kernel

    def kernel(q: torch.Tensor, dropout: float = 0.0) -> attention.VarlenKernel | None:
        if q.dtype not in (torch.float16, torch.bfloat16) or not _cuda_varlen_available(dropout):
            return None
        return _simulated_varlen

    attention.fused_varlen_kernel = kernel
    try:
        yield
    finally:
        attention.fused_varlen_kernel = real


def _cuda_varlen_available(dropout: float) -> bool:
    try:
        import flash_attn  # noqa: F401
        return True
    except ImportError:
        return dropout == 0.0 and torch_varlen_attention() is not None


class _VarlenStandIn(torch.autograd.Function):
    """The memory of a fused varlen attention kernel: ``out`` like ``q``, a float32 log-sum-exp
    ``[H, T]`` kept for the backward with ``q, k, v, out``; the backward's ``dq, dk, dv`` and its
    float32 ``dq`` accumulator."""

    @staticmethod
    def forward(ctx, q, k, v):  # type: ignore[override]
        out = torch.empty_like(q)
        lse = torch.empty(q.shape[1], q.shape[0], dtype=torch.float32, device=q.device)
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        q, k, v, _out, _lse = ctx.saved_tensors
        accumulator = torch.empty(q.shape, dtype=torch.float32, device=q.device)
        del accumulator
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _simulated_varlen(q, k, v, cu, max_len, scale, dropout):  # noqa: ANN001 -- the VarlenKernel signature
    return _VarlenStandIn.apply(q, k, v)
