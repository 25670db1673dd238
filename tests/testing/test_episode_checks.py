"""The contract checks of tools, environments and renderers catch broken components."""

from __future__ import annotations

import attrs
import pytest

from grpo_run import EnvReset, EnvStep, ToolError
from grpo_run.testing import ContractError, check_environment, check_renderer, check_tool
from grpo_run.plugins.renderers.tiny import TinyChatRenderer


@attrs.frozen
class Empty:
    pass


class Echo:
    name = "echo"
    Config = Empty

    def __init__(self, config):
        pass

    def schema(self):
        return {"type": "function", "function": {"name": "echo", "parameters": {"type": "object", "properties": {}}}}

    def __call__(self, arguments):
        if "text" not in arguments:
            raise ToolError("needs text")
        return arguments["text"]


class Crashing(Echo):
    name = "crashing"

    def schema(self):
        return {"type": "function", "function": {"name": "crashing", "parameters": {"type": "object"}}}

    def __call__(self, arguments):
        return arguments["text"]  # KeyError instead of a ToolError


class Misnamed(Echo):
    name = "misnamed"


def test_a_good_tool_passes_and_broken_ones_are_named():
    check_tool(Echo, cases=[({"text": "a"}, "a"), ({}, None)])
    with pytest.raises(ContractError, match="tool 'echo': cases: .* returned 'a', expected 'b'"):
        check_tool(Echo, cases=[({"text": "a"}, "b")])
    with pytest.raises(ContractError, match="tool 'crashing': bad arguments: \\{\\} raised KeyError"):
        check_tool(Crashing)
    with pytest.raises(ContractError, match="function.name is 'echo', not the tool's name 'misnamed'"):
        check_tool(Misnamed)


class RandomStart:
    name = "random-start"
    Config = Empty

    def __init__(self, config, tools):
        self.calls = 0

    def reset(self, row, seed):
        self.calls += 1
        return EnvReset([{"role": "user", "content": f"start {self.calls}"}])

    def step(self, state, action):
        return EnvStep(reward=1.0, done=True)


class NanReward(RandomStart):
    name = "nan-reward"

    def reset(self, row, seed):
        return EnvReset([{"role": "user", "content": "go"}])

    def step(self, state, action):
        return EnvStep(reward=float("nan"), done=True)


def test_environment_checks_catch_an_unseeded_start_and_a_nan_reward():
    with pytest.raises(ContractError, match="same seed, same start"):
        check_environment(RandomStart)
    with pytest.raises(ContractError, match="environment 'nan-reward': step: returned reward nan, not a finite number"):
        check_environment(NanReward)


class StrReward(NanReward):
    name = "str-reward"

    def step(self, state, action):
        return EnvStep([{"role": "user", "content": "again"}], "1.0", False)


class NoneMessages(NanReward):
    name = "none-messages"

    def step(self, state, action):
        return EnvStep(None, 0.0, False)


def test_environment_checks_hold_to_the_runners_contract():
    # What the runner refuses (docs/environments.md, "What an environment may return"), the checks
    # refuse too, with the runner's words.
    with pytest.raises(ContractError, match="step: returned reward '1.0', not a number"):
        check_environment(StrReward)
    with pytest.raises(ContractError, match="step: returned messages None, not a list of messages"):
        check_environment(NoneMessages)


class Rewriting(TinyChatRenderer):
    name = "rewriting"

    def bridge(self, messages, new_messages, tools):
        return [2, 2, 2]  # ids that no fresh render gives


def test_a_renderer_whose_bridge_differs_from_a_fresh_render_fails():
    from transformers import AutoTokenizer

    from grpo_run.plugins.models.sources import CHECKPOINTS_DIR

    tok = AutoTokenizer.from_pretrained(CHECKPOINTS_DIR / "tiny-arithmetic")
    check_renderer(TinyChatRenderer, tok)
    with pytest.raises(ContractError, match="renderer 'rewriting': bridge: prompt \\+ turn \\+ bridge differs"):
        check_renderer(Rewriting, tok)


class Driven:
    name = "driven"
    Config = Empty

    def __init__(self, config, tools):
        pass

    async def run_episode(self, row, seed, chat):
        turn = await chat.complete([{"role": "user", "content": "hi"}])
        return float(turn.text == "hello")


def test_a_driven_environment_passes_and_one_that_never_asks_the_model_fails():
    check_environment(Driven)

    class Silent(Driven):
        async def run_episode(self, row, seed, chat):
            return 1.0

    with pytest.raises(ContractError, match="run_episode.*made no chat.complete call"):
        check_environment(Silent)

    class Nan(Driven):
        async def run_episode(self, row, seed, chat):
            await chat.complete([{"role": "user", "content": "hi"}])
            return float("nan")

    with pytest.raises(ContractError, match="run_episode: returned reward nan, not a finite number"):
        check_environment(Nan)
