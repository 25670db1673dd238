"""The ``verifiers`` environment: a verifiers (0.4.0) environment's rollout, sampled through our chat
in-process; the recorded ids are the sampled ones, the reward is the package's, failures are counted drops."""

from __future__ import annotations

import asyncio
import json
import math

import pytest

pytest.importorskip("verifiers.v1")
pytest.importorskip("openai")

from grpo_run.core.config.environment import EnvironmentSlot  # noqa: E402
from grpo_run.core.plugins.types import SamplingParams  # noqa: E402
from grpo_run.core.rollout.episode_runner import EpisodeFailed, EpisodeRunner  # noqa: E402
from grpo_run.plugins.models.sources import CHECKPOINTS_DIR  # noqa: E402
from grpo_run.plugins.renderers.tiny import TinyChatConfig, TinyChatRenderer  # noqa: E402
from support.episodes import ScriptedEngine  # noqa: E402
from support.paths import TESTS  # noqa: E402

VF_ENVS = TESTS / "support" / "vf_envs"
EOS, USER, ASSISTANT = 1, 2, 3
D = {str(d): 5 + d for d in range(10)}
CALC = [22 + "abcdefghijklmnopqrstuvwxyz".index(ch) for ch in "calculator"]


@pytest.fixture(autouse=True)
def vf_envs_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(VF_ENVS))  # as PYTHONPATH=tests/support/vf_envs does


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(CHECKPOINTS_DIR / "tiny-arithmetic")


def environment(**taskset):
    from grpo_run.plugins.environments.verifiers_env import VerifiersConfig, VerifiersEnvironment

    config = VerifiersConfig(env_id="vf_calculator", env_args={"taskset": {"num_tasks": 4, **taskset}})
    return VerifiersEnvironment(config, {})


def rows(**taskset):
    from grpo_run.plugins.tasks.verifiers_tasks import VerifiersTask, VerifiersTaskConfig

    return VerifiersTask(VerifiersTaskConfig("vf_calculator", {"taskset": {"num_tasks": 4, **taskset}})).train_rows()


def run(env, tokenizer, script, row, **settings):
    engine = ScriptedEngine(tokenizer, script, "<|assistant|>")
    runner = EpisodeRunner(env, TinyChatRenderer(TinyChatConfig(), tokenizer), engine,
                           EnvironmentSlot("verifiers", **settings), SamplingParams(max_new_tokens=64))
    try:
        return asyncio.run(runner.run(row, 7, 0)), engine
    finally:
        runner.close()


def test_the_taskset_is_the_prompt_source():
    first = rows()[0]
    assert first == {"id": "sum-0", "messages": [{"role": "user", "content": "24+48"}], "ground_truth": "",
                     "verifiers_task": 0}


def test_a_verifiers_rollout_trains_on_exactly_the_sampled_ids(tokenizer):
    row = rows()[0]  # 24+48
    episode, engine = run(environment(), tokenizer, ["calculator(24+48)", "72"], row)
    prompt = [USER, D["2"], D["4"], 15, D["4"], D["8"], ASSISTANT]  # <|user|>24+48<|assistant|>
    turn1 = CALC + [19, D["2"], D["4"], 15, D["4"], D["8"], 20, EOS]  # calculator(24+48)<|eos|>
    ext = [USER, D["7"], D["2"], ASSISTANT]  # the harness's tool result: <|user|>72<|assistant|>
    turn2 = [D["7"], D["2"], EOS]
    (seg,) = episode.segments  # the harness sent our turn back: one segment, no re-tokenisation
    assert list(seg.prompt_ids) == prompt
    assert list(seg.completion_ids) == turn1 + ext + turn2
    assert list(seg.sampled) == [True] * 18 + [False] * 4 + [True] * 3
    assert all(math.isnan(x) for x in seg.logprobs[18:22]) and seg.logprobs[:3] == (-0.01, -0.02, -0.03)
    assert [call[0] for call in engine.calls] == [prompt, prompt + turn1 + ext]
    assert episode.env_reward == 1.0
    assert episode.metrics["env/verifiers/vf_calculator/tool_calls"] == 1.0
    assert episode.metrics["env/verifiers/vf_calculator/reward/correct"] == 1.0


@pytest.mark.parametrize("script, reward", [(["calculator(24+48)", "72"], 1.0), (["calculator(24+48)", "71"], 0.0),
                                            (["72"], 1.0)])
def test_the_reward_is_what_the_package_computes_for_the_same_completions(tokenizer, script, reward):
    from verifiers.v1.clients import Client, ModelContext
    from verifiers.v1.configs.client import EvalClientConfig

    from grpo_run.plugins.environments.verifiers_env import env_config
    from verifiers.v1.utils.loaders import load_environment

    row = rows()[0]
    ours, _ = run(environment(), tokenizer, script, row)

    class Scripted(Client):  # the same completions, served by a client of the package's own kind
        async def get_response(self, dialect, body, sampling, session_id=None, turn=None, headers=None):
            text = script[len([m for m in body["messages"] if m["role"] == "assistant"])]
            calls = ([{"id": "c1", "type": "function", "function": {"name": "calculator", "arguments":
                                                                     json.dumps({"expression": text[11:-1]})}}]
                     if text.startswith("calculator(") else None)
            raw = {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [
                {"index": 0, "finish_reason": "tool_calls" if calls else "stop",
                 "message": {"role": "assistant", "content": text, "tool_calls": calls}}]}
            response = dialect.parse_response(dialect.validate_response(raw))
            response.raw = raw
            return response

    env = load_environment(env_config("vf_calculator", {"taskset": {"num_tasks": 4}}))

    async def package_rollout():
        async with env.serving():
            acquire = env._interception.acquire

            def scripted(session):
                context = acquire(session)

                class Swap:
                    async def __aenter__(self):
                        slot = await context.__aenter__()
                        session.client = Scripted()
                        return slot

                    async def __aexit__(self, *exc):
                        return await context.__aexit__(*exc)
                return Swap()

            env._interception.acquire = scripted
            ctx = ModelContext(model="m", client=EvalClientConfig(base_url="http://127.0.0.1:9/v1"))
            return await env.run_episode(list(env.taskset)[0], ctx)

    (trace,) = asyncio.run(package_rollout()).traces
    assert trace.reward == reward and ours.env_reward == reward
    assert ours.metrics["env/verifiers/vf_calculator/tool_calls"] == trace.metrics["tool_calls"]


def test_a_rollout_past_max_turns_ends_truncated_with_the_packages_reward(tokenizer):
    episode, engine = run(environment(), tokenizer, ["calculator(24+48)", "72"], rows()[0], max_turns=1)
    assert len(engine.calls) == 1  # the second model call could not be taken
    assert episode.env_reward == 0.0 and episode.metrics["env/truncated"] == 1.0


def test_a_turn_cut_at_its_length_limit_runs_no_tool_and_counts_truncated(tokenizer):
    episode, engine = run(environment(), tokenizer, ["calculator(24+48)", "72"], rows()[0], max_tokens_per_turn=5)
    # the harness saw finish_reason "length" and ran no tool
    assert len(engine.calls) == 1 and len(episode.segments[0].completion_ids) == 5
    assert episode.env_reward == 0.0 and episode.metrics["env/truncated"] == 1.0
    assert episode.metrics["env/verifiers/vf_calculator/tool_calls"] == 0.0


def test_a_failing_verifiers_env_fails_its_episode(tokenizer):
    with pytest.raises(EpisodeFailed, match="the verifiers rollout of 'vf_calculator' failed: .*the harness broke"):
        run(environment(broken=True), tokenizer, ["72"], rows(broken=True)[0])


def test_a_rollout_past_the_episode_timeout_fails_its_episode_and_the_env_goes_on(tokenizer):
    import time

    env = environment(stuck=True)
    started = time.monotonic()
    with pytest.raises(EpisodeFailed, match="episode_timeout_s = 1") as info:
        run(env, tokenizer, ["72"], rows(stuck=True)[0], episode_timeout_s=1.0)
    assert info.value.timed_out and time.monotonic() - started < 60
    assert not env._clients  # the abandoned rollout's client is gone
    env.env.taskset.config.stuck = False  # the same env (its serving loop) plays the next episode
    env.tasks = list(env.env.taskset)
    episode, _ = run(env, tokenizer, ["72"], rows()[0])
    assert episode.env_reward == 1.0


def test_a_row_without_a_task_index_fails_its_episode(tokenizer):
    with pytest.raises(EpisodeFailed, match="row 'r' has no verifiers_task index"):
        run(environment(), tokenizer, ["72"], {"id": "r", "messages": [{"role": "user", "content": "1+1"}]})


def test_tool_schemas_convert_both_ways():
    from verifiers.v1.types import Tool

    from grpo_run.plugins.environments.verifiers_client import tools_from_openai, tools_to_openai
    from support.vf_envs.vf_calculator import CALCULATOR

    flat = tools_from_openai([CALCULATOR])
    assert flat == [{"type": "function", "name": "calculator", "description": CALCULATOR["function"]["description"],
                     "parameters": CALCULATOR["function"]["parameters"]}]
    assert tools_to_openai([Tool.model_validate(flat[0])]) == [CALCULATOR]
    with pytest.raises(ValueError, match="only function tools render"):
        tools_to_openai([Tool(type="mcp", name="web")])


@pytest.mark.parametrize("key, env_id, env_args, match", [
    ("env_id", "no_such_vf_env", {}, "verifiers cannot load 'no_such_vf_env': taskset 'no_such_vf_env' not found"),
    ("env_id", "", {}, "must name a verifiers taskset id"),
    ("env_args", "vf_calculator", {"taskset": {"num_taskz": 3}}, "verifiers rejects env 'vf_calculator'"),
])
def test_a_bad_env_is_a_config_error_naming_the_key(key, env_id, env_args, match):
    from grpo_run.core.errors import ConfigError
    from grpo_run.core.config.loading import parse_config
    from grpo_run.core.plugins.host import build_plugin_host

    data = {"model": {"name_or_path": "tiny-arithmetic"}, "task": {"name": "arithmetic"},
            "environment": {"name": "verifiers", "env_id": env_id, "env_args": env_args},
            "renderer": {"name": "tiny-chat"}, "verifiers": {"math": {}}}
    with pytest.raises(ConfigError, match=f"environment.{key}: .*{match}"):
        parse_config(data, build_plugin_host().registry)
    data["task"] = {"name": "verifiers", "env_id": env_id, "env_args": env_args}  # the task source says the same
    data["environment"] = {"name": "tools"}
    with pytest.raises(ConfigError, match=f"task.{key}: .*{match}"):
        parse_config(data, build_plugin_host().registry)


CONFIG = """
[model]
name_or_path = "tiny-arithmetic"

[task]
name = "verifiers"
env_id = "vf_calculator"
env_args = { taskset = { num_tasks = 40 } }
num_eval = 8

[data]
max_prompt_token_length = 16

[rollout]
num_unique_prompts_rollout = 4
num_samples_per_prompt_rollout = 4
response_length = 32

[environment]
name = "verifiers"
env_id = "vf_calculator"
env_args = { taskset = { num_tasks = 40 } }
max_turns = 3
max_tokens_per_turn = 18

[renderer]
name = "tiny-chat"

[scoring]
row_verifiers = false

[verifiers.non_stop_penalty]
all_rows = true

[algorithm]
pack_length = 512

[train]
total_steps = 2
"""


def test_a_verifiers_env_trains_two_steps(tmp_path):
    from grpo_run.cli.main import main

    config = tmp_path / "vf.toml"
    config.write_text(CONFIG)
    out = tmp_path / "out"
    argv = [str(config), "--output-dir", str(out), "--set", "logging.progress=false", "--set", "optim.warmup_steps=1"]
    assert main(argv) == 0
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train = [line for line in lines if line.get("env/episodes")]
    assert [line["step"] for line in train] == [1, 2]
    for line in train:
        assert line["env/episodes"] == 16 and line["env/error_rate"] == 0
        assert "env/verifiers/vf_calculator/tool_calls" in line and line["env/segments_mean"] == 1


def test_a_request_translates_to_our_messages_and_our_turn_back_to_the_packages_response():
    from verifiers.v1.dialects.anthropic import AnthropicDialect
    from verifiers.v1.dialects.chat import ChatDialect

    from grpo_run import ChatTurn, ParsedTurn, ToolCall
    from grpo_run.plugins.environments.verifiers_client import ChatClient
    from support.vf_envs.vf_calculator import CALCULATOR

    seen = []

    class Chat:
        async def complete(self, messages, tools=(), *, max_tokens=None, stop=None):
            seen.append((messages, tools, max_tokens, stop))
            turn = ParsedTurn("calculator(2+2)", (ToolCall("calculator", {"expression": "2+2"}, "call_7"),))
            return ChatTurn(turn, (30, 31), (-0.5, -0.25), "stop", 9, 2)

    client = ChatClient(Chat())
    body = {"model": "m", "max_tokens": 5, "stop": "\n", "tools": [CALCULATOR], "messages": [
        {"role": "system", "content": "be brief"}, {"role": "user", "content": [{"type": "text", "text": "1+1"}]},
        {"role": "assistant", "content": None, "tool_calls": [  # a turn grpo-run did not sample
            {"id": "x1", "type": "function",
             "function": {"name": "calculator", "arguments": "{\"expression\": \"1+1\"}"}}]},
        {"role": "tool", "tool_call_id": "x1", "content": "2"}]}
    response = asyncio.run(client.get_response(ChatDialect(), body, None))
    messages, tools, max_tokens, stop = seen[0]
    assert messages == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "1+1"},
                        {"role": "assistant", "content": "", "tool_calls": [
                            {"id": "x1", "type": "function",
                             "function": {"name": "calculator", "arguments": "{\"expression\": \"1+1\"}"}}]},
                        {"role": "tool", "tool_call_id": "x1", "content": "2", "name": "calculator"}]
    assert tools == [CALCULATOR] and max_tokens == 5 and stop == ["\n"]
    assert response.finish_reason == "tool_calls" and response.message.content == "calculator(2+2)"
    (call,) = response.message.tool_calls
    assert (call.id, call.name, json.loads(call.arguments)) == ("call_7", "calculator", {"expression": "2+2"})
    assert response.tokens.completion_ids == [30, 31] and response.tokens.completion_logprobs == [-0.5, -0.25]
    assert response.raw["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "calculator"
    assert ChatDialect().parse_response(ChatDialect().validate_response(response.raw)).message == response.message
    # our turn sent back: rendered as sampled (its text), not as structured calls
    body["messages"] += [{"role": "assistant", "content": "calculator(2+2)", "tool_calls": response.raw["choices"][0]
                          ["message"]["tool_calls"]}, {"role": "tool", "tool_call_id": "call_7", "content": "4"}]
    asyncio.run(client.get_response(ChatDialect(), body, None))
    assert seen[1][0][-2] == {"role": "assistant", "content": "calculator(2+2)"}
    with pytest.raises(ValueError, match="chat-completions dialect only, not AnthropicDialect"):
        asyncio.run(client.get_response(AnthropicDialect(), {}, None))
