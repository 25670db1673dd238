"""A run through the CLI with a KL penalty against a Polyak reference, 2 learner ranks over gloo,
2 steps: with the reference sharded (fsdp2, DeepSpeed ZeRO-3) each rank holds about half of it
(``learners_started`` says how much) and the KL the learner reports matches one process's.

The model is a tiny Llama whose MLP weights are wide enough (64 x 2048) for ZeRO-3 to partition
them. Each run starts two rank processes (~30-60 s on a loaded 2-core machine): ``heavy``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM

from support.runs import write_run
from support.verifiers import DIGIT_SHARE

from grpo_run.cli.main import main

pytestmark = pytest.mark.heavy

KL = {"beta": 0.1, "reference": "polyak", "alpha": 0.5}


@pytest.fixture(scope="module")
def wide_model_dir(tmp_path_factory) -> Path:
    from grpo_run.plugins.models.char_tokenizer import build_char_tokenizer
    from grpo_run.plugins.models.tiny_llama import TinyLlamaSize, build_tiny_llama

    path = tmp_path_factory.mktemp("wide-model")
    tokenizer = build_char_tokenizer(model_max_length=64)
    size = TinyLlamaSize(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=2048, max_position_embeddings=64)
    build_tiny_llama(size, tokenizer, seed=0).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def run(tmp_path: Path, model_dir: Path, name: str, **learner: object) -> Path:
    cfg = write_run(
        tmp_path, verifier=DIGIT_SHARE, name=f"{name}.toml", model={"name_or_path": str(model_dir)}, kl=KL,
        algorithm={"num_mini_batches": 2},  # the second update of step 1 already sees a KL > 0
        learner={"threads_per_learner": 1, **learner} if learner else {},
    )
    out = tmp_path / name
    assert main([str(cfg), "--output-dir", str(out)]) == 0
    return out


def rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def reference_bytes(out: Path) -> list[int]:
    started = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines() if '"learners_started"' in line]
    return [rank["reference_bytes"] for rank in started[0]["ranks"]]


@pytest.fixture(scope="module")
def one_process(tmp_path_factory, wide_model_dir) -> list[dict]:
    return rows(run(tmp_path_factory.mktemp("one"), wide_model_dir, "one"))


@pytest.mark.parametrize("learner", [
    pytest.param({"strategy": "fsdp2"}, id="fsdp2"),
    pytest.param({"strategy": "deepspeed", "zero_stage": 3}, id="zero3"),
])
def test_a_sharded_reference_gives_the_kl_of_one_process(tmp_path, wide_model_dir, one_process, learner) -> None:
    if learner["strategy"] == "deepspeed":
        pytest.importorskip("deepspeed")
    out = run(tmp_path, wide_model_dir, "two", num_learners=2, **learner)
    whole = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(wide_model_dir).parameters()) * 4  # fp32
    assert all(0.45 * whole < b < 0.6 * whole for b in reference_bytes(out)), (reference_bytes(out), whole)
    two = rows(out)
    assert [r["step"] for r in two] == [1, 2]
    for one, mine in zip(one_process, two):
        assert mine["reward/mean"] == one["reward/mean"]  # the same rollouts
        assert one["loss/kl"] > 0
        assert mine["loss/kl"] == pytest.approx(one["loss/kl"], rel=1e-4, abs=1e-9)
