"""What an environment returns is checked inside the episode's failure boundary (issue 33): each
bad value from ``reset``, ``step``, ``finish`` or ``run_episode`` -- and ``SystemExit`` /
``KeyboardInterrupt`` raised by environment code, sync or async -- fails its episode with one line
naming the call and the value, never a traceback. Rewards lie in ``environment.reward_range``;
opening messages are cut and must fit the context; an endless iterator of messages is read no
further than the cap."""

from __future__ import annotations

import asyncio
import itertools
import math

import pytest
import torch

from grpo_run import EnvReset, EpisodeResult
from grpo_run.core.config.environment import EnvironmentSlot
from grpo_run.core.plugins.types import SamplingParams
from grpo_run.core.rollout import env_returns
from grpo_run.core.rollout.advantages import group_advantages
from grpo_run.core.rollout.episode_runner import EpisodeFailed, EpisodeRunner
from grpo_run.core.rollout.episodes import combine_rewards
from grpo_run.plugins.models.sources import CHECKPOINTS_DIR
from grpo_run.plugins.renderers.tiny import TinyChatConfig, TinyChatRenderer
from support.episodes import ScriptedEngine
from support.hostile_env import EXPECTED, KINDS, HostileConfig, HostileEnv

@pytest.fixture(scope="module")
def renderer():
    from transformers import AutoTokenizer

    return TinyChatRenderer(TinyChatConfig(), AutoTokenizer.from_pretrained(CHECKPOINTS_DIR / "tiny-arithmetic"))


def run(env, renderer, *, context_tokens=128, script=("3",), **settings):
    engine = ScriptedEngine(renderer.tokenizer, list(script), "<|assistant|>")
    runner = EpisodeRunner(env, renderer, engine, EnvironmentSlot("hostile", **settings), SamplingParams(max_new_tokens=32),
                           context_tokens=context_tokens)
    try:
        return asyncio.run(runner.run({"id": "r", "prompt": "1+2"}, 7, 0)), engine
    finally:
        runner.close()


def test_every_kind_has_an_expected_message():
    assert sorted(EXPECTED) == sorted(KINDS)


@pytest.mark.parametrize("kind", KINDS)
def test_a_bad_value_fails_its_episode_with_one_line_naming_it(renderer, kind):
    with pytest.raises(EpisodeFailed) as failed:
        run(HostileEnv(HostileConfig([kind]), {}), renderer, max_turns=2)
    message = str(failed.value)
    assert EXPECTED[kind] in message and "\n" not in message and len(message) < 400


def test_the_same_environment_without_bad_values_plays_its_episodes(renderer):
    env = HostileEnv(HostileConfig(["reward-str"], every=2), {})
    env.kind_of({"id": "first"})  # the first row gets the bad value, the second (ours) none
    episode, _ = run(env, renderer)
    assert episode.env_reward == 0.5 and episode.turn_rewards == (0.5,)


# -- driven environments (run_episode) ---------------------------------------------------------


class Driven:
    name = "driven"

    def __init__(self, outcome):
        self.outcome = outcome

    async def run_episode(self, row, seed, chat):
        await chat.complete([{"role": "user", "content": "1+2"}])
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome


@pytest.mark.parametrize("outcome, expected", [
    ("no reward", "run_episode returned 'no reward', not an EpisodeResult or a number"),
    (True, "run_episode returned True, not an EpisodeResult or a number"),
    (10**400, "run_episode returned reward an int of about 400 digits, not a float"),
    (EpisodeResult(1e308), "run_episode returned reward 1e+308, outside environment.reward_range = [-100, 100]"),
    (EpisodeResult(0.5, None), "run_episode returned metrics None, not a mapping"),
    (EpisodeResult(0.5, {"n": "x"}), "run_episode returned metrics['n'] 'x', not a number"),
    (EpisodeResult(0.5, {}, "\udcff"), "run_episode returned text is not valid text"),
    (SystemExit(2), "environment run_episode raised SystemExit: 2"),
    (KeyboardInterrupt(), "environment run_episode raised KeyboardInterrupt: "),
])
def test_a_driven_episode_that_returns_a_bad_value_fails(renderer, outcome, expected):
    with pytest.raises(EpisodeFailed, match=expected.replace("(", r"\(").replace("[", r"\[").replace("+", r"\+")):
        run(Driven(outcome), renderer)


def test_a_driven_reward_within_the_range_is_kept(renderer):
    episode, _ = run(Driven(EpisodeResult(-3.0, {"n": True})), renderer)
    assert episode.env_reward == -3.0 and episode.metrics["env/n"] == 1.0


# -- rewards: the range ------------------------------------------------------------------------


def test_rewards_are_bounded_by_the_configured_range(renderer):
    env = HostileEnv(HostileConfig(["reward-1e308"]), {})
    with pytest.raises(EpisodeFailed, match=r"outside environment.reward_range = \[-1e\+06, 1e\+06\]"):
        run(env, renderer, reward_range=(-1e6, 1e6))
    assert env_returns.reward(-100, "reward", (-100.0, 100.0)) == -100.0  # closed interval
    with pytest.raises(env_returns.BadReturn, match="outside"):
        env_returns.reward(100.5, "reward", (-100.0, 100.0))


@pytest.mark.parametrize("bad", [(1.0, 0.0), (0.0, math.inf), (-2e6, 0.0), (math.nan, 1.0)])
def test_a_reward_range_must_be_finite_ordered_and_at_most_1e6(bad):
    with pytest.raises(ValueError, match="must"):
        EnvironmentSlot("x", reward_range=bad)


def test_advantages_of_the_largest_bounded_rewards_are_finite():
    # The widest range, the most a trajectory can add: every turn's reward plus finish's, each 1e6,
    # over 1000 turns (1e9 per episode), in a group of 64 with one outlier; float64 throughout.
    top = combine_rewards([1e6] * 1000, "sum") + 1e6
    rewards = torch.tensor([[top] + [-top] * 63], dtype=torch.float64)
    for kind in ("standard", "centered"):
        adv = group_advantages(rewards, kind)
        assert torch.isfinite(adv).all()
    assert group_advantages(rewards)[0, 0].item() == pytest.approx(7.875, rel=1e-3)  # (x - mean) / std: sqrt(63)ish


# -- sizes: opening messages, the context, endless iterators -----------------------------------


def test_an_opening_message_is_cut_at_max_opening_chars(renderer):
    env = HostileEnv(HostileConfig(["opening-100kb"]), {})
    episode, engine = run(env, renderer, max_opening_chars=12)
    assert episode.messages[0]["content"] == "1+2 1+2 1+2 ... [cut at 12 characters]"
    assert len(engine.calls[0][0]) < 60  # the prompt the engine saw: the cut message


def test_an_opening_that_leaves_no_room_for_the_episode_fails_it(renderer):
    env = HostileEnv(HostileConfig(["opening-100kb"]), {})
    with pytest.raises(EpisodeFailed, match=r"the opening messages render to \d+ tokens, which with the episode's 32 "
                                            r"\(rollout.response_length\) exceed the 128 one sequence may hold"):
        run(env, renderer, max_opening_chars=200)
    episode, _ = run(env, renderer, max_opening_chars=60)  # 60, the note, the markup and 32 fit 128
    assert episode.turns == 1


def test_an_endless_iterator_of_messages_is_read_no_further_than_the_cap():
    drawn = itertools.count()
    endless = ({"role": "user", "content": str(next(drawn))} for _ in itertools.repeat(None))
    with pytest.raises(env_returns.BadReturn, match="more than 64 messages"):
        env_returns.messages(endless, "messages", max_chars=10)
    assert next(drawn) == env_returns.MAX_MESSAGES + 1


def test_a_huge_message_is_cut_before_it_is_checked():
    content = "x" * 10_000_000 + "\ud800"  # the surrogate is past the cut: never looked at
    [message] = env_returns.messages([{"role": "tool", "content": content}], "messages", max_chars=5)
    assert message == {"role": "tool", "content": "xxxxx... [cut at 5 characters]"}


def test_messages_the_renderer_cannot_render_fail_the_episode(renderer):
    class Refusing(TinyChatRenderer):
        def render(self, messages, tools):
            if any(m["role"] == "narrator" for m in messages):
                raise ValueError("no role 'narrator' in this template")
            return super().render(messages, tools)

    env = HostileEnv(HostileConfig(["reward-str"]), {})
    env.reset = lambda row, seed: EnvReset([{"role": "narrator", "content": "once"}])
    with pytest.raises(EpisodeFailed, match="the renderer could not render the environment's messages: "
                                            "ValueError: no role 'narrator' in this template"):
        run(env, Refusing(TinyChatConfig(), renderer.tokenizer))


def test_a_driven_conversation_longer_than_a_sequence_fails_its_episode(renderer):
    class Long(Driven):
        async def run_episode(self, row, seed, chat):
            await chat.complete([{"role": "user", "content": "1+2 " * 40}])
            return 1.0

    with pytest.raises(EpisodeFailed, match=r"run_episode's conversation grew to \d+ tokens, more than the 128 one "
                                            r"sequence may hold"):
        run(Long(None), renderer)
