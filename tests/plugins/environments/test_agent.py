"""The ``agent`` environment: agent code on the real ``openai`` client against the episode's
loopback endpoint; the recorded ids are the sampled ones, failures are counted drops."""

from __future__ import annotations

import asyncio
import json
import math
import socket
import time

import pytest

pytest.importorskip("openai")
pytest.importorskip("uvicorn")

from grpo_run import EpisodeOver  # noqa: E402
from grpo_run.core.config.environment import EnvironmentSlot  # noqa: E402
from grpo_run.core.plugins.types import SamplingParams  # noqa: E402
from grpo_run.core.rollout.episode_runner import EpisodeFailed, EpisodeRunner  # noqa: E402
from grpo_run.plugins.environments.agent import AgentConfig, AgentEnvironment  # noqa: E402
from grpo_run.plugins.models.sources import CHECKPOINTS_DIR  # noqa: E402
from grpo_run.plugins.renderers.tiny import TinyChatConfig, TinyChatRenderer  # noqa: E402
from support import agent_envs  # noqa: E402
from support.episodes import ScriptedEngine  # noqa: E402
from support.token_io import RecordingEngine, assert_token_in_token_out  # noqa: E402

EOS, USER, ASSISTANT = 1, 2, 3
D = {str(d): 5 + d for d in range(10)}
CALC = [22 + "abcdefghijklmnopqrstuvwxyz".index(ch) for ch in "calculator"]
THREE_TURNS = ["calculator(12+7)", "calculator(19*2)", "38"]
ROW = {"id": "r", "messages": [{"role": "user", "content": "12+7"}], "ground_truth": "38"}


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(CHECKPOINTS_DIR / "tiny-arithmetic")


def agent(function):
    return AgentEnvironment(AgentConfig(function=f"support.agent_envs:{function}"), {})


def run(env, tokenizer, script=THREE_TURNS, prompt_limit=None, delay_s=0.0, **settings):
    engine = RecordingEngine(ScriptedEngine(tokenizer, script, "<|assistant|>"), delay_s)
    runner = EpisodeRunner(env, TinyChatRenderer(TinyChatConfig(), tokenizer), engine,
                           EnvironmentSlot("agent", **settings), SamplingParams(max_new_tokens=64),
                           prompt_limit=prompt_limit)
    try:
        return asyncio.run(runner.run(ROW, 7, 0)), engine
    finally:
        runner.close()


def test_an_agent_on_the_openai_client_trains_on_exactly_the_sampled_ids(tokenizer):
    agent_envs.RESPONSES.clear()
    env = agent("record")
    episode, engine = run(env, tokenizer)
    prompt = [USER, D["1"], D["2"], 15, D["7"], ASSISTANT]  # <|user|>12+7<|assistant|>
    turn1 = CALC + [19, D["1"], D["2"], 15, D["7"], 20, EOS]  # calculator(12+7)<|eos|>
    ext1 = [USER, D["1"], D["9"], ASSISTANT]  # the agent's tool result, rendered: <|user|>19<|assistant|>
    turn2 = CALC + [19, D["1"], D["9"], 17, D["2"], 20, EOS]  # calculator(19*2)<|eos|>
    ext2 = [USER, D["3"], D["8"], ASSISTANT]
    turn3 = [D["3"], D["8"], EOS]
    (seg,) = episode.segments  # the agent sent the served turns back: one segment, no re-tokenisation
    assert list(seg.prompt_ids) == prompt
    assert list(seg.completion_ids) == turn1 + ext1 + turn2 + ext2 + turn3
    assert list(seg.sampled) == [True] * 17 + [False] * 4 + [True] * 17 + [False] * 4 + [True] * 3
    assert all(math.isnan(x) for x in seg.logprobs[17:21]) and seg.logprobs[:3] == (-0.01, -0.02, -0.03)
    assert [call[0] for call in engine.calls] == [prompt, prompt + turn1 + ext1, prompt + turn1 + ext1 + turn2 + ext2]
    models, *responses = agent_envs.RESPONSES
    assert [m.id for m in models.data] == ["policy"]
    first, second, last = responses
    # OpenAI tool calling: the renderer's parse as tool_calls, finish_reason "tool_calls"
    call = first.choices[0].message.tool_calls[0]
    assert (call.type, call.function.name, json.loads(call.function.arguments)) == (
        "function", "calculator", {"expression": "12+7"})
    assert first.choices[0].finish_reason == "tool_calls" and last.choices[0].finish_reason == "stop"
    assert last.choices[0].message.content == "38" and last.choices[0].message.tool_calls is None
    assert [(r.usage.prompt_tokens, r.usage.completion_tokens) for r in responses] == [(6, 17), (27, 17), (48, 3)]
    assert second.choices[0].message.tool_calls[0].id != call.id
    assert episode.env_reward == 1.0 and episode.text == "38" and episode.metrics["env/requests"] == 3


def test_the_calculator_agent_solves_and_is_rewarded(tokenizer):
    episode, _ = run(agent("solve"), tokenizer)
    assert episode.env_reward == 1.0 and episode.turns == 3


def test_a_malformed_request_is_answered_400_and_drops_the_episode(tokenizer):
    with pytest.raises(EpisodeFailed, match=r"the agent sent a malformed request: messages\[0\] needs a role"):
        run(agent("malformed"), tokenizer)


def test_the_endpoint_answers_a_malformed_body_with_400_and_a_message():
    import httpx

    from grpo_run.plugins.environments.agent_server import EpisodeServer

    server = EpisodeServer()
    server.start()
    try:
        token = server.open_episode(chat=None, loop=None)  # type: ignore[arg-type]  # never reached
        url = server.base_url(token)
        for body, message in [(b"{not json", "the body is not JSON"),
                              (json.dumps({"messages": []}).encode(), "'messages' must be a non-empty array"),
                              (json.dumps({"messages": [{"role": "user", "content": "x"}], "stream": True}).encode(),
                               "stream = true is not supported")]:
            got = httpx.post(f"{url}/chat/completions", content=body, timeout=10)
            assert got.status_code == 400 and message in got.json()["error"]["message"]
        assert len(server.close_episode(token).errors) == 3
        assert httpx.post(f"{url}/chat/completions", json={}, timeout=10).status_code == 404  # the episode ended
    finally:
        server.close()


@pytest.mark.parametrize("function, match, timed_out", [
    ("broken", "the agent support.agent_envs:broken raised RuntimeError: the agent broke", False),
    ("forever", "the environment's own time in the episode passed environment.episode_timeout_s = 1 ", True),
])
def test_an_agent_that_raises_or_overruns_fails_its_episode(tokenizer, function, match, timed_out):
    with pytest.raises(EpisodeFailed, match=match) as info:
        run(agent(function), tokenizer, episode_timeout_s=1.0)
    assert info.value.timed_out == timed_out


def test_a_client_that_never_closes_does_not_hang_the_episode(tokenizer):
    started = time.monotonic()
    episode, _ = run(agent("never_closes"), tokenizer, episode_timeout_s=60.0)
    assert episode.env_reward == 1.0 and time.monotonic() - started < 30
    assert agent_envs.LEFT_OPEN  # still open: the episode ended without it


def test_parallel_sub_queries_of_an_agent_are_each_trained_after_the_ids_they_were_sampled_after(tokenizer):
    # Each turn takes 0.3 s, so that the two sub-queries are served at the same time.
    episode, engine = run(agent("parallel_subqueries"), tokenizer, script=["5", "6", "7", "8"], delay_s=0.3)
    assert [r.choices[0].message.content for r in agent_envs.PARALLEL] == ["6", "6"]  # both answered
    assert len(engine.records) == episode.turns == 4 and episode.metrics["env/requests"] == 4
    assert_token_in_token_out(episode, engine.records)
    assert len(episode.segments) >= 2  # the branch that does not extend the ids so far: a segment of its own


def test_hundreds_of_requests_of_one_episode_at_once_sample_max_turns_turns(tokenizer, monkeypatch):
    import openai

    agent_envs.AT_ONCE.clear()
    monkeypatch.setattr(agent_envs, "AT_ONCE_COUNT", 300)  # 1000 take 8 s here: docs/reliability.md measures them
    episode, engine = run(agent("thousand_at_once"), tokenizer, script=["5"], max_turns=3)
    assert len(engine.records) == episode.turns == 3
    assert_token_in_token_out(episode, engine.records)
    answered = [r for r in agent_envs.AT_ONCE if not isinstance(r, Exception)]
    assert [r.choices[0].message.content for r in answered].count("5") == 3
    assert {r.choices[0].finish_reason for r in answered if not r.choices[0].message.content} <= {"length"}
    refused = [r for r in agent_envs.AT_ONCE if isinstance(r, Exception)]  # 429: more than 16 in flight
    assert all(isinstance(r, openai.RateLimitError) for r in refused), {type(r).__name__ for r in refused}
    assert len(answered) + len(refused) == 300
    if refused:
        assert "requests of this episode are being served already (environment.max_requests_in_flight = 16)" in (
            str(refused[0]))


def test_a_100_kb_request_is_refused_before_it_is_tokenised_or_sampled(tokenizer, monkeypatch):
    import tomllib

    from grpo_run.core.config.loading import parse_config
    from grpo_run.core.loop.build import first_prompt_limit
    from grpo_run.core.plugins.host import build_plugin_host
    from support.paths import EXAMPLES

    monkeypatch.syspath_prepend(str(EXAMPLES))
    data = tomllib.loads((EXAMPLES / "agent-calculator.toml").read_text())
    cfg = parse_config(data, build_plugin_host().registry)
    limit = first_prompt_limit(cfg, tokenizer)  # the tiny model's context of 128, less response_length = 32
    assert (limit.tokens, limit.why) == (96, "the model's context of 128 - rollout.response_length")
    rendered = []
    monkeypatch.setattr(TinyChatRenderer, "render", lambda self, m, t: rendered.append(m) or [])
    refused = r"every call was refused: the conversation \(100000 characters\) cannot fit the episode's 96 ids"
    with pytest.raises(EpisodeFailed, match=f"run_episode sampled no turn \\({refused}\\)"):
        run(agent("huge_request"), tokenizer, prompt_limit=limit)
    assert rendered == []


def test_the_endpoint_refuses_a_body_over_its_limit_with_413():
    import httpx

    from grpo_run.plugins.environments.agent_server import EpisodeServer

    server = EpisodeServer(max_request_bytes=1000)
    server.start()
    try:
        token = server.open_episode(chat=None, loop=None)  # type: ignore[arg-type]  # never reached
        url = f"{server.base_url(token)}/chat/completions"
        body = json.dumps({"messages": [{"role": "user", "content": "7" * 5000}]}).encode()
        sized = httpx.post(url, content=body, timeout=10)
        chunked = httpx.post(url, content=iter([body[:600], body[600:]]), timeout=10)  # no Content-Length
        assert sized.status_code == chunked.status_code == 413
        message = "the request body is larger than environment.max_request_bytes = 1000 bytes"
        assert sized.json()["error"]["message"] == f"{message} ({len(body)} bytes)"
        assert chunked.json()["error"]["message"] == message
        assert server.close_episode(token).errors == [f"{message} ({len(body)} bytes)", message]  # drops it
    finally:
        server.close()


def test_a_request_past_the_episodes_calls_in_flight_is_answered_429_at_once():
    import concurrent.futures
    import threading

    import httpx

    from grpo_run.plugins.environments.agent_server import EpisodeServer

    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    release = asyncio.Event()

    class Waits:
        async def complete(self, *args, **kwargs):
            await release.wait()
            raise EpisodeOver("the episode can take no more turns: done")

        def turns_left(self):
            return 1

    server = EpisodeServer(max_in_flight=1)
    server.start()
    try:
        url = f"{server.base_url(server.open_episode(Waits(), loop))}/chat/completions"
        body = {"messages": [{"role": "user", "content": "1+1"}]}
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            first = pool.submit(httpx.post, url, json=body, timeout=10)
            deadline = time.monotonic() + 10
            while not any(e.in_flight for e in server.episodes.values()) and time.monotonic() < deadline:
                time.sleep(0.01)
            second = httpx.post(url, json=body, timeout=10)
            assert second.status_code == 429 and second.json()["error"]["message"] == (
                "1 requests of this episode are being served already (environment.max_requests_in_flight = 1); "
                "retry after one is answered")
            loop.call_soon_threadsafe(release.set)
            assert first.result().status_code == 200  # the episode over: an empty turn, "length"
    finally:
        server.close()
        loop.call_soon_threadsafe(loop.stop)


def test_the_endpoint_listens_on_loopback_only():
    from grpo_run.plugins.environments.agent_server import EpisodeServer

    server = EpisodeServer()
    server.start()
    try:
        (listening,) = [s for srv in server._server.servers for s in srv.sockets]
        assert listening.getsockname()[0] == "127.0.0.1"
        probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            probe.connect(("10.255.255.255", 1))  # no packet is sent: this only picks the outward address
            outward = probe.getsockname()[0]
        except OSError:
            outward = None
        finally:
            probe.close()
        if outward and not outward.startswith("127."):
            with pytest.raises(OSError):
                socket.create_connection((outward, server.port), timeout=5).close()
    finally:
        server.close()


@pytest.mark.parametrize("function, match", [
    ("nowhere_module:solve", "cannot import 'nowhere_module'"),
    ("support.agent_envs:missing", "has no 'missing'"),
    ("support.agent_envs:not_async", "must be an async def f\\(row, base_url\\) -> float"),
    ("solve", "must be 'module:function'"),
])
def test_a_bad_function_is_a_config_error_naming_the_key(function, match):
    from grpo_run.core.errors import ConfigError
    from grpo_run.core.config.loading import parse_config
    from grpo_run.core.plugins.host import build_plugin_host

    data = {"model": {"name_or_path": "tiny-arithmetic"}, "task": {"name": "arithmetic"},
            "environment": {"name": "agent", "function": function}, "renderer": {"name": "tiny-chat"},
            "verifiers": {"math": {}}}
    with pytest.raises(ConfigError, match=f"environment.function: .*{match}"):
        parse_config(data, build_plugin_host().registry)


def test_the_agent_example_trains_two_steps_through_the_cli(tmp_path, monkeypatch):
    from grpo_run.cli.main import main
    from support.paths import EXAMPLES

    monkeypatch.syspath_prepend(str(EXAMPLES))  # as PYTHONPATH=examples does
    out = tmp_path / "out"
    argv = [str(EXAMPLES / "agent-calculator.toml"), "--output-dir", str(out)]
    for override in ["rollout.num_unique_prompts_rollout=4", "rollout.num_samples_per_prompt_rollout=4",
                     "train.total_steps=2", "optim.warmup_steps=1", "logging.progress=false", "task.num_eval=8"]:
        argv += ["--set", override]
    assert main(argv) == 0
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [0, 1, 2]
    assert lines[0]["eval/num_prompts"] == 8  # greedy agent episodes
    for line in lines[1:]:
        assert line["env/episodes"] == 16 and line["env/error_rate"] == 0
        assert line["env/requests"] == line["env/turns_mean"] >= 1 and line["env/segments_mean"] == 1


def test_a_bad_agent_function_is_named_by_grpo_run_check(tmp_path, capsys, monkeypatch):
    from grpo_run.cli.main import main
    from support.paths import EXAMPLES

    monkeypatch.syspath_prepend(str(EXAMPLES))
    bad = tmp_path / "bad.toml"
    bad.write_text((EXAMPLES / "agent-calculator.toml").read_text().replace("agent_calculator:solve",
                                                                            "agent_calculator:calculate"))
    assert main(["check", str(bad)]) == 2
    assert ("bad.toml: environment.function: 'agent_calculator:calculate' must be an async def "
            "f(row, base_url) -> float") in capsys.readouterr().err


def test_a_run_whose_agent_always_raises_stops_with_the_agents_error(tmp_path, capsys, monkeypatch):
    from grpo_run.cli.main import main
    from support.paths import EXAMPLES

    monkeypatch.syspath_prepend(str(EXAMPLES))
    argv = [str(EXAMPLES / "agent-calculator.toml"), "--output-dir", str(tmp_path / "out")]
    for override in ["rollout.num_unique_prompts_rollout=4", "rollout.num_samples_per_prompt_rollout=4",
                     "train.total_steps=2", "logging.progress=false", "task.num_eval=8", "train.local_eval_every=0",
                     "environment.function=support.agent_envs:broken", "scoring.error_min_calls=16"]:
        argv += ["--set", override]
    assert main(argv) != 0
    err = capsys.readouterr().err
    assert "environment 'agent' failed 16 of its last 16 calls" in err
    assert "the agent support.agent_envs:broken raised RuntimeError: the agent broke" in err


@pytest.mark.slow  # 12-19 s on 2 cores: 5 steps of 8 x 8 agent episodes, two greedy evals of 64
def test_the_agent_example_learns_on_the_shipped_model(tmp_path, monkeypatch):
    """The agent's own reward (its answer equals the sum) on held-out problems, greedy: about 0.03
    before training (the shipped model's biased sums), about 0.86 after 5 steps here."""
    from grpo_run.cli.main import main
    from support.paths import EXAMPLES

    monkeypatch.syspath_prepend(str(EXAMPLES))
    out = tmp_path / "run"
    argv = [str(EXAMPLES / "agent-calculator.toml"), "--output-dir", str(out)]
    for override in ["train.total_steps=15", "train.stop_at_eval_accuracy=0.7", "checkpoint.save_freq=0",
                     "logging.progress=false"]:
        argv += ["--set", override]
    assert main(argv) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [(r["step"], r["eval/env_reward_mean"]) for r in rows if "eval/env_reward_mean" in r]
    assert evals[0][0] == 0 and evals[0][1] <= 0.2, evals
    assert evals[-1][1] >= 0.7, evals  # the agent's reward, not only the math verifier's
    assert all(r["env/error_rate"] == 0 for r in rows if "env/error_rate" in r)


def test_environment_and_function_alone_are_a_whole_config(tmp_path, capsys, monkeypatch):
    # No [renderer]: the shipped char model's own format (tiny-chat) is chosen, and said once; so
    # is the rows' math verifier that also scores each episode's last turn.
    from grpo_run.cli.main import main
    from support.paths import EXAMPLES

    monkeypatch.syspath_prepend(str(EXAMPLES))
    config = tmp_path / "agent.toml"
    text = (EXAMPLES / "agent-calculator.toml").read_text()
    config.write_text(text[:text.index("[renderer]")] + text[text.index("[algorithm]"):])
    assert "[renderer]" not in config.read_text()
    argv = [str(config), "--output-dir", str(tmp_path / "out")]
    for override in ["rollout.num_unique_prompts_rollout=4", "rollout.num_samples_per_prompt_rollout=4",
                     "train.total_steps=2", "optim.warmup_steps=1", "task.num_eval=8", "train.local_eval_every=2"]:
        argv += ["--set", override]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert err.count('renderer "tiny-chat": the chat format of the \'tiny-arithmetic\' model (no [renderer] table)') == 1
    assert err.count("environment 'agent': each episode's last turn is also scored by the rows' verifier (math) "
                     "against the row's ground truth, added to the environment's reward; set "
                     "scoring.row_verifiers = false for the environment's reward alone") == 1
    lines = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert lines[-1]["step"] == 2 and lines[-1]["env/requests"] >= 1  # the agent's calculator calls parsed


def test_a_tokenizer_without_a_chat_template_needs_a_renderer_table():
    from grpo_run.core.config.loading import parse_config
    from grpo_run.core.errors import UserError
    from grpo_run.core.loop.episode_setup import chosen_renderer
    from grpo_run.core.plugins.host import build_plugin_host

    registry = build_plugin_host().registry
    data = {"model": {"name_or_path": "some/model"}, "task": {"name": "arithmetic"},
            "environment": {"name": "agent", "function": "support.agent_envs:solve"},
            "verifiers": {"math": {}}}
    cfg = parse_config(data, registry)

    class NoTemplate:
        chat_template = None

    class WithTemplate:
        chat_template = "{{ messages }}"

    with pytest.raises(UserError) as e:
        chosen_renderer(cfg, registry, NoTemplate())
    assert str(e.value).startswith("model.name_or_path='some/model': its tokenizer has no chat template, so the "
                                   "[environment] needs a [renderer] table")
    name, config, note = chosen_renderer(cfg, registry, WithTemplate())
    assert (name, type(config).__name__, note) == (
        "chat-template", "ChatTemplateConfig",
        'renderer "chat-template": the model tokenizer\'s chat template (no [renderer] table)')
