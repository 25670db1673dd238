"""The episode producer: groups of episodes scored like completions, environment rewards added,
a failing environment dropped and counted (fatal only when the error rate says so, or when every
episode of a batch failed)."""

from __future__ import annotations

import asyncio

import pytest

from grpo_run import EnvStep
from grpo_run.core.config.environment import EnvironmentSlot
from grpo_run.core.errors import RunError
from grpo_run.core.plugins.types import SamplingParams
from grpo_run.core.rollout.episode_producer import EpisodeProducer
from grpo_run.core.rollout.episode_runner import EpisodeRunner
from grpo_run.core.scoring.metrics import ErrorRateGuard, ScoringMetrics
from grpo_run.core.scoring.scorer import ScoredBatch, ScoredCompletion
from grpo_run.plugins.models.sources import CHECKPOINTS_DIR
from grpo_run.plugins.renderers.tiny import TinyChatConfig, TinyChatRenderer
from grpo_run.plugins.tools.calculator import CalculatorConfig, CalculatorTool
from support.episodes import DrivenCalcEnv, ScriptedEngine, ScriptedEnv

G = 4


class Sampler:
    def sample(self, n):
        return [{"id": f"r{i}", "prompt": "12+7", "ground_truth": "19"} for i in range(n)]

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


class Scorer:
    """1.0 when the final text equals the ground truth."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    async def score(self, rows, texts, finish_reasons=None, num_tokens=None, *, training=True):
        self.texts += texts
        return ScoredBatch([ScoredCompletion(float(t == r["ground_truth"]), 1.0, {}) for r, t in zip(rows, texts)],
                           ScoringMetrics())

    def state_dict(self):
        return {}  # no rescaled verifier: nothing for a checkpoint


class Encoder:
    def encode(self, row):
        return [0]


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(CHECKPOINTS_DIR / "tiny-arithmetic")


def producer(tokenizer, env, *, guard=None, step_timeout_s=5.0, **options):
    engine = ScriptedEngine(tokenizer, ["calculator(12+7)", "19"], "<|assistant|>")
    settings = EnvironmentSlot("scripted", step_timeout_s=step_timeout_s, **options)
    params = SamplingParams(n=G, max_new_tokens=64)
    runner = EpisodeRunner(env, TinyChatRenderer(TinyChatConfig(), tokenizer), engine, settings, params)
    return EpisodeProducer(Sampler(), engine, Scorer(), Encoder(), params, 3,
                           runner=runner, run_seed=1, env_name="scripted", guard=guard)


def test_episodes_are_scored_on_their_last_turn_and_env_rewards_add(tokenizer):
    prod = producer(tokenizer, ScriptedEnv({"calculator": CalculatorTool(CalculatorConfig())}, reward=0.25))
    batch = asyncio.run(prod.produce(1))
    prod.close()
    assert len(batch.groups) == 3 and all(len(g.completions) == G for g in batch.groups)
    assert prod.scorer.texts == ["19"] * 12
    # verifier 1.0 + two turns of 0.25 each (reward_combination = "sum")
    assert all(r == pytest.approx(1.5) for g in batch.groups for r in g.rewards)
    m = batch.scoring_metrics
    assert m["env/turns_mean"] == 2 and m["env/tool_calls_mean"] == 1 and m["env/error_rate"] == 0
    assert m["env/env_token_share"] == pytest.approx(4 / (17 + 4 + 3))
    assert prod.rollout_state()["groups_drawn"] == 3


@pytest.mark.parametrize("granularity, returns", [("trajectory", ()), ("turn", (1.5, 1.25))])
def test_episodes_carry_their_returns_to_go_per_turn_when_asked(tokenizer, granularity, returns):
    env = ScriptedEnv({"calculator": CalculatorTool(CalculatorConfig())}, reward=0.25)
    prod = producer(tokenizer, env, advantage_granularity=granularity)
    batch = asyncio.run(prod.produce(1))
    prod.close()
    # verifier 1.0 + two turns of 0.25: G_0 = 1.5 (the episode's reward), G_1 = 1.0 + 0.25
    assert all(r == pytest.approx(1.5) for g in batch.groups for r in g.rewards)
    assert {e.returns for g in batch.groups for e in g.completions} == {returns}


class BrokenButForRowR0(ScriptedEnv):
    """``fail`` breaks the steps of every row but ``r0``, whose episodes end at their first turn."""

    def reset(self, row, seed):
        out = super().reset(row, seed)
        out.state["healthy"] = row["id"] == "r0"
        return out

    def step(self, state, action):
        return EnvStep((), self.reward, True) if state["healthy"] else super().step(state, action)


@pytest.mark.parametrize("fail", ["raise", "hang", "garbage"])
def test_a_failing_environment_is_a_counted_drop_not_a_crash(tokenizer, fail):
    env = BrokenButForRowR0({"calculator": CalculatorTool(CalculatorConfig())}, fail=fail, hang_s=3.0)
    prod = producer(tokenizer, env, step_timeout_s=0.5)
    batch = asyncio.run(asyncio.wait_for(prod.produce(1), 60))
    prod.close()
    assert [g.row["id"] for g in batch.groups] == ["r0"]
    assert batch.scoring_metrics["env/error_rate"] == pytest.approx(2 / 3)
    assert batch.scoring_metrics["env/timeout_rate"] == pytest.approx(2 / 3 if fail == "hang" else 0.0)
    assert batch.failure is not None and batch.failure.startswith("environment 'scripted' failed (first failure, row 'r")
    assert env.closed == 3 * G  # close ran for every episode, failed or not


def test_a_batch_whose_every_episode_failed_stops_the_run(tokenizer):
    # Below any error-rate rule: nothing to train on means the environment is broken.
    env = ScriptedEnv({"calculator": CalculatorTool(CalculatorConfig())}, fail="raise")
    prod = producer(tokenizer, env)
    with pytest.raises(RunError, match=r"^step 1: all 12 episodes failed, so there is nothing to train on: "
                                       r"environment 'scripted' failed \(first failure, row 'r\d'\): environment step "
                                       r"raised RuntimeError: the environment broke\. Fix the environment"):
        asyncio.run(prod.produce(1))
    prod.close()
    assert env.closed == 3 * G


def test_too_many_failing_episodes_stop_the_run_through_the_error_rate_rule(tokenizer):
    env = ScriptedEnv({"calculator": CalculatorTool(CalculatorConfig())}, fail="raise")
    prod = producer(tokenizer, env, guard=ErrorRateGuard(0.5, window=20, min_calls=4, what="environment"))
    with pytest.raises(RunError, match="environment 'scripted' failed 12 of its last 12 calls.*the environment broke"):
        asyncio.run(prod.produce(1))
    prod.close()


def test_evaluation_runs_greedy_episodes_scored_on_their_last_turn(tokenizer):
    from grpo_run.core.data.prompts import PromptRow
    from grpo_run.core.loop.evaluation import Evaluator

    env = ScriptedEnv({"calculator": CalculatorTool(CalculatorConfig())})
    prod = producer(tokenizer, env)
    engine = prod.runner.engine
    rows = [PromptRow({"id": f"e{i}", "prompt": "12+7", "ground_truth": gt}, [0]) for i, gt in enumerate(["19", "20"])]
    evaluator = Evaluator(engine, Scorer(), rows, 64, episodes=prod.runner)
    metrics = asyncio.run(evaluator.evaluate(0))
    prod.close()
    assert metrics["eval/accuracy"] == 0.5 and metrics["eval/num_prompts"] == 2
    assert [params.greedy for _, params in engine.calls] == [True] * 4  # two turns of two episodes
    assert [len(env.actions)] == [4]


def test_driven_episodes_are_scored_and_their_rewards_add(tokenizer):
    env = DrivenCalcEnv(CalculatorTool(CalculatorConfig()))
    prod = producer(tokenizer, env)
    batch = asyncio.run(prod.produce(1))
    prod.close()
    assert len(batch.groups) == 3 and prod.scorer.texts == ["19"] * 12
    # verifier 1.0 + the environment's own reward (1.0: its last text is the row's ground truth)
    assert all(r == pytest.approx(2.0) for g in batch.groups for r in g.rewards)
    assert batch.scoring_metrics["env/turns_mean"] == 2 and batch.scoring_metrics["env/calls"] == 2


class DrivenButForRowR0:
    """A broken driven environment whose row ``r0`` runs on a healthy one."""

    name = "driven"
    Config = DrivenCalcEnv.Config

    def __init__(self, broken: DrivenCalcEnv, healthy: DrivenCalcEnv) -> None:
        self.broken, self.healthy = broken, healthy

    async def run_episode(self, row, seed, chat):
        return await (self.healthy if row["id"] == "r0" else self.broken).run_episode(row, seed, chat)


def test_a_failing_driven_environment_is_a_counted_drop(tokenizer):
    tool = CalculatorTool(CalculatorConfig())
    env = DrivenButForRowR0(DrivenCalcEnv(tool, fail="raise"), DrivenCalcEnv(tool))
    prod = producer(tokenizer, env)
    prod.runner.settings = EnvironmentSlot("driven", episode_timeout_s=5.0)
    batch = asyncio.run(asyncio.wait_for(prod.produce(1), 60))
    prod.close()
    assert [g.row["id"] for g in batch.groups] == ["r0"]
    assert batch.scoring_metrics["env/error_rate"] == pytest.approx(2 / 3)
    assert batch.scoring_metrics["env/timeout_rate"] == 0.0


def test_a_hanging_driven_environment_times_out_every_episode_and_stops_the_run(tokenizer):
    # Every episode runs out of time: the batch has nothing left to train on.
    env = DrivenCalcEnv(CalculatorTool(CalculatorConfig()), fail="hang", hang_s=30.0)
    prod = producer(tokenizer, env)
    prod.runner.settings = EnvironmentSlot("driven", episode_timeout_s=0.5)
    with pytest.raises(RunError, match=r"^step 1: all 12 episodes failed, .*: the environment's own time in the "
                                       r"episode passed environment\.episode_timeout_s = 0\.5 \(.*\)\. Fix the environment"):
        asyncio.run(asyncio.wait_for(prod.produce(1), 60))
    prod.close()


def test_evaluation_reports_the_environment_rewards_and_metrics(tokenizer):
    from grpo_run.core.data.prompts import PromptRow
    from grpo_run.core.loop.evaluation import Evaluator

    env = ScriptedEnv({"calculator": CalculatorTool(CalculatorConfig())}, reward=0.25)
    prod = producer(tokenizer, env)
    rows = [PromptRow({"id": f"e{i}", "prompt": "12+7", "ground_truth": gt}, [0]) for i, gt in enumerate(["19", "20"])]
    metrics = asyncio.run(Evaluator(prod.runner.engine, Scorer(), rows, 64, episodes=prod.runner).evaluate(0))
    prod.close()
    # two turns of 0.25 each; the verifier adds 1 to the first episode only
    assert metrics["eval/env_reward_mean"] == 0.5 and metrics["eval/reward_mean"] == 1.0
    assert metrics["eval/env/turns_mean"] == 2 and metrics["eval/env/tool_calls_mean"] == 1
    assert metrics["eval/env/episodes"] == 2 and metrics["eval/env/error_rate"] == 0
