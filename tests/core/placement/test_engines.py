"""``engine.num_engines``: several engines behind one, any engine class, in this process."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
import torch
from transformers import AutoTokenizer

from grpo_run import Completion, EngineContext, SamplingParams
from grpo_run.core.errors import UserError
from grpo_run.core.placement.engines import SEED_STRIDE, EnginePool, engine_contexts, split_evenly
from grpo_run.core.placement.local import LocalPlacement
from grpo_run.plugins.engines.hf import HFEngine


class EchoEngine:
    """Answers each prompt with its own tokens; records calls and weights."""

    def __init__(self, tag: int) -> None:
        self.tag = tag
        self.calls: list[list[list[int]]] = []
        self.weights: list[tuple[dict, int]] = []

    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Completion]]:
        self.calls.append([list(p) for p in prompts])
        await asyncio.sleep(0.01 * (3 - self.tag))  # later engines finish first
        return [[Completion(tuple(p), (0.0,) * len(p), f"e{self.tag}", "stop", 0)] * params.n for p in prompts]

    async def update_weights(self, state_dict, version: int) -> None:
        self.weights.append((state_dict, version))

    def state_dict(self) -> dict[str, int]:
        return {"tag": self.tag}

    def load_state_dict(self, state) -> None:
        self.tag = state["tag"]

    def close(self) -> None:
        pass


def test_split_evenly_gives_contiguous_nearly_equal_chunks() -> None:
    assert split_evenly(7, 3) == [(0, 3), (3, 5), (5, 7)]
    assert split_evenly(2, 3) == [(0, 1), (1, 2), (2, 2)]


def test_pool_splits_prompts_and_keeps_their_order() -> None:
    engines = [EchoEngine(i) for i in range(3)]
    pool = EnginePool(engines)
    prompts = [[i, i + 1] for i in range(7)]
    groups = asyncio.run(pool.generate(prompts, SamplingParams(n=2)))
    assert [g[0].token_ids for g in groups] == [tuple(p) for p in prompts]
    assert [len(e.calls[0]) for e in engines] == [3, 2, 2]
    assert [g[0].text for g in groups] == ["e0"] * 3 + ["e1"] * 2 + ["e2"] * 2


def test_pool_streams_every_prompt_once_with_its_index() -> None:
    pool = EnginePool([EchoEngine(i) for i in range(3)])
    prompts = [[i] for i in range(5)]

    async def collect():
        return [(i, g[0].token_ids) async for i, g in pool.generate_stream(prompts, SamplingParams())]

    seen = asyncio.run(collect())
    assert sorted(seen) == [(i, (i,)) for i in range(5)]
    assert seen[0][0] >= 3  # the last engine answered first: streamed as they finish


def test_pool_sends_weights_to_every_engine_and_checkpoints_each_state() -> None:
    engines = [EchoEngine(i) for i in range(2)]
    pool = EnginePool(engines)
    weights = {"w": torch.ones(2)}
    asyncio.run(pool.update_weights(weights, 5))
    assert [e.weights for e in engines] == [[(weights, 5)], [(weights, 5)]]
    state = pool.state_dict()
    assert state == {"engines": [{"tag": 0}, {"tag": 1}]}
    pool.load_state_dict({"engines": [{"tag": 7}, {"tag": 8}]})
    assert [e.tag for e in engines] == [7, 8]
    with pytest.raises(UserError, match=r"state of 1 engine\(s\) and engine.num_engines = 2"):
        pool.load_state_dict({"calls": 3})


def test_each_engine_gets_its_own_seed() -> None:
    context = EngineContext(model_path="m", tokenizer=None, dtype=torch.float32, device="cpu", seed=5)
    assert [c.seed for c in engine_contexts(context, 3)] == [5, 5 + SEED_STRIDE, 5 + 2 * SEED_STRIDE]


def test_two_hf_engines_generate_what_one_does(tiny_model_dir) -> None:
    # Greedy decoding is deterministic: two engines over halves of the prompts give exactly the
    # completions one engine gives for all of them.
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    context = EngineContext(str(tiny_model_dir), tokenizer, torch.float32, "cpu", seed=1)
    config = HFEngine.Config()
    placement = LocalPlacement()
    one = placement.engines(HFEngine, config, context, 1)
    two = placement.engines(HFEngine, config, context, 2)
    assert isinstance(one, HFEngine) and isinstance(two, EnginePool) and len(two.engines) == 2
    prompts = [tokenizer.encode(f"{i}+{i}=") for i in range(5)]
    params = SamplingParams(n=1, max_new_tokens=6, greedy=True)
    want = asyncio.run(one.generate(prompts, params))
    got = asyncio.run(two.generate(prompts, params))
    assert [[c.token_ids for c in g] for g in got] == [[c.token_ids for c in g] for g in want]
    # New weights reach both engines.
    zeros = {k: torch.zeros_like(v) for k, v in one.model.state_dict().items()}
    asyncio.run(two.update_weights(zeros, 3))
    assert all(e.version == 3 and float(next(e.model.parameters()).abs().sum()) == 0.0 for e in two.engines)
    two.close()
    one.close()
