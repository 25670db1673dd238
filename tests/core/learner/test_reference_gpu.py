"""The reference policy on CUDA (``gpu``: skipped cleanly without CUDA; the fsdp2 case needs two
GPUs): ``kl.reference_dtype = "auto"`` holds it in bf16 where forwards compute in bf16, its
log-probs stay within bf16 rounding of an fp32 reference's, and a Polyak reference stays fp32."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
import torch

from support.learner import make_seqs
from support.reference_ranks import on_every_rank, reference_logprobs, reference_spec, save_wide_model, start_reference_ranks

from grpo_run.core.config.schema import KLSlot
from grpo_run.core.learner.learner import build_learner
from grpo_run.core.placement.flat import encode_sequences

pytestmark = pytest.mark.gpu

BF16_ATOL = 4 * 2**-8
"""As in test_reference.py: one bf16 rounding step of a log-prob of size 4."""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return save_wide_model(tmp_path_factory.mktemp("gpu-wide-model"))


def cuda_spec(model_dir: Path, kl: KLSlot, device: str = "cuda:0"):  # type: ignore[no-untyped-def]
    spec = reference_spec(model_dir, kl=kl, autocast="bfloat16")
    return attrs.evolve(spec, model=attrs.evolve(spec.model, device=device))


def test_auto_holds_a_frozen_reference_in_bf16_and_a_polyak_one_in_fp32(model_dir) -> None:
    frozen = build_learner(cuda_spec(model_dir, KLSlot(beta=0.1)))
    assert {p.dtype for p in frozen.reference.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in frozen.policy.parameters()} == {torch.float32}
    seqs = make_seqs(9, seed=4)
    spec = frozen.spec
    today = reference_logprobs(frozen.policy.eval(), seqs, spec)  # the initial policy: fp32 weights, bf16 autocast
    got = reference_logprobs(frozen.reference, seqs, spec)
    torch.testing.assert_close(got, today, rtol=0, atol=BF16_ATOL)
    polyak = build_learner(cuda_spec(model_dir, KLSlot(beta=0.1, reference="polyak")))
    assert {p.dtype for p in polyak.reference.parameters()} == {torch.float32}


def test_an_fsdp2_reference_on_two_gpus_is_sharded_in_bf16(model_dir) -> None:
    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs 2 CUDA devices, found {torch.cuda.device_count()}")
    spec = cuda_spec(model_dir, KLSlot(beta=0.1), device="cuda")
    group = start_reference_ranks(spec, "fsdp2", backend="nccl")
    seqs = make_seqs(9, seed=4)
    try:
        held = on_every_rank(group, "reference_held")
        got = on_every_rank(group, "reference_logprobs", encode_sequences(seqs))
    finally:
        group.close()
    whole = build_learner(attrs.evolve(spec, model=attrs.evolve(spec.model, device="cuda:0")))
    want = reference_logprobs(whole.reference, seqs, whole.spec).cpu()
    assert all(dtype == "torch.bfloat16" for _, dtype in held)
    for ranks in got:
        torch.testing.assert_close(ranks, want, rtol=0, atol=1e-3)  # the same bf16 weights, other kernels
