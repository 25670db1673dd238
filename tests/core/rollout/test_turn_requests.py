"""Episode turns on an engine that batches requests itself (``continuous_batching``, as vLLM):
each turn is its own request, seeded by its own ``(group seed, sample, turn)`` key, sent without
waiting for the other episodes; an engine pool spreads such requests over its engines; and every
turn records the policy version that sampled it (in traces too)."""

from __future__ import annotations

import asyncio
import time

import pytest

from grpo_run.core.config.environment import EnvironmentSlot
from grpo_run.core.loop.traces import episode_spans
from grpo_run.core.placement.engines import EnginePool
from grpo_run.core.plugins.types import SamplingParams
from grpo_run.core.rollout.episode_runner import EpisodeRunner
from grpo_run.core.rollout.episodes import derive_seed
from grpo_run.plugins.models.sources import CHECKPOINTS_DIR
from grpo_run.plugins.renderers.tiny import TinyChatConfig, TinyChatRenderer
from grpo_run.plugins.tools.calculator import CalculatorConfig, CalculatorTool
from support.episodes import ScriptedEngine, ScriptedEnv

THREE_TURNS = ["calculator(12+7)", "calculator(19*2)", "38"]


@pytest.fixture(scope="module")
def tiny_tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(CHECKPOINTS_DIR / "tiny-arithmetic")


class ContinuousEngine(ScriptedEngine):
    """A scripted engine that says it batches requests itself; the policy version moves on after
    every ``bump_every`` calls (an in-flight update), and each call is stamped with its time."""

    continuous_batching = True

    def __init__(self, *args, bump_every: int = 0, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.bump_every = bump_every
        self.stamps: list[float] = []

    async def generate(self, prompts, params):
        self.stamps.append(time.monotonic())
        out = await super().generate(prompts, params)
        if self.bump_every and len(self.calls) % self.bump_every == 0:
            self.version += 1
        return out


class SlowFirstSample(ScriptedEnv):
    """Sample 0's steps take ``delay_s``; the others answer at once."""

    def __init__(self, delay_s: float) -> None:
        super().__init__({"calculator": CalculatorTool(CalculatorConfig())})
        self.delay_s = delay_s

    def reset(self, row, seed):
        reset = super().reset(row, seed)
        return type(reset)(reset.messages, reset.tools, {"slow": row["sample"] == 0})

    def step(self, state, action):
        if state["slow"]:
            time.sleep(self.delay_s)
        return super().step(state, action)


def _group(tokenizer, engine, env, n=3, seed=99):
    runner = EpisodeRunner(env, TinyChatRenderer(TinyChatConfig(), tokenizer), engine, EnvironmentSlot("scripted"),
                           SamplingParams(max_new_tokens=64))

    async def episodes():
        return await asyncio.gather(*(runner.run({"id": "r", "prompt": "12+7", "sample": g}, seed, g)
                                      for g in range(n)))
    try:
        return asyncio.run(episodes()), runner
    finally:
        runner.close()


def test_each_turn_is_its_own_request_seeded_by_its_own_key(tiny_tokenizer):
    engine = ContinuousEngine(tiny_tokenizer, THREE_TURNS, "<|assistant|>")
    episodes, runner = _group(tiny_tokenizer, engine, ScriptedEnv({"calculator": CalculatorTool(CalculatorConfig())}))
    assert runner.batcher.calls == 9 and len(engine.calls) == 9
    turn_of = {6: 0, 27: 1, 48: 2}  # the prompt length of turn t
    keys = sorted((turn_of[len(p)], params.seed) for p, params in engine.calls)
    assert keys == sorted((t, derive_seed(99, g, t)) for g in range(3) for t in range(3))
    assert all(params.n == 1 for _, params in engine.calls)
    assert all(e.text == "38" and e.turns == 3 for e in episodes)


def test_a_slow_environment_does_not_hold_back_the_other_episodes_turns(tiny_tokenizer):
    engine = ContinuousEngine(tiny_tokenizer, THREE_TURNS, "<|assistant|>")
    started = time.monotonic()
    _group(tiny_tokenizer, engine, SlowFirstSample(delay_s=1.0))
    # Samples 1 and 2 finish all their turns while sample 0 is still in its first step: 7 of the 9
    # requests are sent within the first second. In lockstep only the first round (3) would be.
    assert sum(stamp - started < 0.9 for stamp in engine.stamps) == 7


def test_every_turn_records_the_policy_version_that_sampled_it(tiny_tokenizer):
    engine = ContinuousEngine(tiny_tokenizer, THREE_TURNS, "<|assistant|>", bump_every=1)
    (episode,), _ = _group(tiny_tokenizer, engine, ScriptedEnv({"calculator": CalculatorTool(CalculatorConfig())}), n=1)
    assert episode.turn_versions == ((0, 0), (1, 1), (2, 2))
    assert episode.policy_versions == (0, 2)  # staleness counts from the oldest turn
    decode = lambda ids: tiny_tokenizer.decode(list(ids), skip_special_tokens=False)  # noqa: E731
    spans = episode_spans(episode, decode)
    assert [s.get("policy_version") for s in spans] == [0, None, 1, None, 2]


def test_an_engine_pool_spreads_single_requests_over_its_engines_and_keeps_their_flag(tiny_tokenizer):
    engines = [ContinuousEngine(tiny_tokenizer, ["7"], "<|assistant|>") for _ in range(2)]
    pool = EnginePool(engines)
    assert pool.continuous_batching is True
    assert EnginePool([engines[0], ScriptedEngine(tiny_tokenizer, ["7"], "x")]).continuous_batching is False
    ids = tiny_tokenizer("<|user|>1+1<|assistant|>", add_special_tokens=False)["input_ids"]
    for _ in range(4):
        asyncio.run(pool.generate([ids], SamplingParams(max_new_tokens=4, seed=5)))
    assert [len(e.calls) for e in engines] == [2, 2]
