"""``environment.episode_timeout_s`` counts the environment's own time: an episode whose calls are
instant lives through any generation, however slow; a slow environment still runs into the limit,
across turns; waiting for a free environment thread does not count either."""

from __future__ import annotations

import asyncio
import time

import pytest

from grpo_run import EnvStep
from grpo_run.core.config.environment import EnvironmentSlot
from grpo_run.core.plugins.types import SamplingParams
from grpo_run.core.rollout.episode_runner import EpisodeFailed, EpisodeRunner
from grpo_run.plugins.models.sources import CHECKPOINTS_DIR
from grpo_run.plugins.renderers.tiny import TinyChatConfig, TinyChatRenderer
from grpo_run.plugins.tools.calculator import CalculatorConfig, CalculatorTool
from support.episodes import DrivenCalcEnv, ScriptedEngine, ScriptedEnv

THREE_TURNS = ["calculator(12+7)", "calculator(19*2)", "38"]
ROWS = [{"id": f"r{i}", "prompt": "12+7", "ground_truth": "38"} for i in range(4)]
LIMIT = "the environment's own time in the episode passed environment.episode_timeout_s = 0.5 "


@pytest.fixture(scope="module")
def tiny_tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(CHECKPOINTS_DIR / "tiny-arithmetic")


class SlowEngine(ScriptedEngine):
    """Each generate call takes ``delay_s``: a busy machine's batched generation."""

    def __init__(self, *args, delay_s: float, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.delay_s = delay_s

    async def generate(self, prompts, params):
        await asyncio.sleep(self.delay_s)
        return await super().generate(prompts, params)


class SlowStepEnv(ScriptedEnv):
    """Every ``step`` takes ``step_s`` (``async``: awaited; else on a thread)."""

    def __init__(self, step_s: float, **kwargs) -> None:
        super().__init__({"calculator": CalculatorTool(CalculatorConfig())}, **kwargs)
        self.step_s = step_s

    def step(self, state, action):
        time.sleep(self.step_s)
        return super().step(state, action)


class SlowAsyncStepEnv(SlowStepEnv):
    async def step(self, state, action):  # type: ignore[override]
        await asyncio.sleep(self.step_s)
        return ScriptedEnv.step(self, state, action)


def run_all(env, engine, tokenizer, rows=ROWS, **settings):
    runner = EpisodeRunner(env, TinyChatRenderer(TinyChatConfig(), tokenizer), engine,
                           EnvironmentSlot("scripted", **settings), SamplingParams(max_new_tokens=64))
    try:
        return asyncio.run(runner.run_many(rows, [7] * len(rows), SamplingParams(max_new_tokens=64)))
    finally:
        runner.close()


def test_instant_steps_through_a_generation_slower_than_the_limit_never_time_out(tiny_tokenizer):
    # Three turns of 0.4 s generation each: 1.2 s of wall time per episode, none of it the environment's.
    engine = SlowEngine(tiny_tokenizer, THREE_TURNS, "<|assistant|>", delay_s=0.4)
    env = ScriptedEnv({"calculator": CalculatorTool(CalculatorConfig())})
    results = run_all(env, engine, tiny_tokenizer, episode_timeout_s=0.3)

    assert [type(r).__name__ for r in results] == ["Episode"] * 4, results
    assert all(r.turns == 3 and r.metrics["generation_s"] >= 1.2 for r in results)
    assert all(r.metrics["env_s"] < 0.3 for r in results)


def test_an_agent_whose_own_code_is_instant_lives_through_slow_generation(tiny_tokenizer):
    engine = SlowEngine(tiny_tokenizer, THREE_TURNS, "<|assistant|>", delay_s=0.4)
    results = run_all(DrivenCalcEnv(CalculatorTool(CalculatorConfig())), engine, tiny_tokenizer, episode_timeout_s=0.3)

    assert [type(r).__name__ for r in results] == ["Episode"] * 4, results
    assert all(r.turns == 3 and r.env_reward == 1.0 for r in results)


@pytest.mark.parametrize("env_cls", [SlowStepEnv, SlowAsyncStepEnv])
def test_a_slow_environment_runs_into_the_limit_across_turns(tiny_tokenizer, env_cls):
    # Each step takes 0.3 s, each generation 0.3 s: the limit (0.5 s) falls in the second step.
    engine = SlowEngine(tiny_tokenizer, THREE_TURNS, "<|assistant|>", delay_s=0.3)
    results = run_all(env_cls(0.3), engine, tiny_tokenizer, rows=ROWS[:1], episode_timeout_s=0.5, step_timeout_s=5)

    assert isinstance(results[0], EpisodeFailed) and results[0].timed_out
    assert str(results[0]).startswith(LIMIT), results[0]
    assert len(engine.calls) == 2  # two turns were generated; the second step ran into the limit


def test_an_agent_whose_own_code_is_slow_runs_into_the_limit(tiny_tokenizer):
    engine = SlowEngine(tiny_tokenizer, THREE_TURNS, "<|assistant|>", delay_s=0.0)
    env = DrivenCalcEnv(CalculatorTool(CalculatorConfig()), fail="hang", hang_s=30.0)
    started = time.monotonic()
    results = run_all(env, engine, tiny_tokenizer, rows=ROWS[:1], episode_timeout_s=0.5)

    assert isinstance(results[0], EpisodeFailed) and str(results[0]).startswith(LIMIT), results[0]
    assert time.monotonic() - started < 10


def test_waiting_for_a_free_environment_thread_does_not_count(tiny_tokenizer):
    # One thread, four episodes whose one step takes 0.3 s: the last waits ~0.9 s for the thread.
    engine = ScriptedEngine(tiny_tokenizer, ["38"], "<|assistant|>")
    results = run_all(SlowStepEnv(0.3), engine, tiny_tokenizer, episode_timeout_s=0.5, workers=1)

    assert [type(r).__name__ for r in results] == ["Episode"] * 4, results
