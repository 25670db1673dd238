"""The ``chat-template`` renderer's other tool-call formats (``[renderer] tool_format``): Llama 3
JSON and Mistral calls read from token ids, their parse errors, and the bridge on a Llama 3.1-like
template (tool answers as ``ipython`` turns), down to the ids of a whole episode."""

from __future__ import annotations

import asyncio
import math

import pytest

from grpo_run import ToolCall
from grpo_run.core.config.environment import EnvironmentSlot
from grpo_run.core.plugins.types import SamplingParams
from grpo_run.core.rollout.episode_runner import EpisodeRunner
from grpo_run.plugins.renderers.hermes import ChatTemplateConfig, ChatTemplateRenderer
from grpo_run.plugins.renderers.tool_formats import parse_llama3_json, parse_mistral
from grpo_run.plugins.tools.calculator import CalculatorConfig, CalculatorTool
from support.episodes import ScriptedEngine, ScriptedEnv, chatml_tokenizer
from support.llama_chat import llama_tokenizer

TOOLS = [CalculatorTool(CalculatorConfig()).schema()]
# The test vocabulary (support/llama_chat.py): pad 0, <|eot_id|> 1, <|begin_of_text|> 2,
# <|start_header_id|> 3, <|end_header_id|> 4, <|python_tag|> 5, unk 6, then string.printable from 7.
EOT, BOT, START, END, PYTHON_TAG = 1, 2, 3, 4, 5


def _chars(text: str) -> list[int]:
    import string

    return [7 + string.printable.index(ch) for ch in text]


def llama_renderer() -> ChatTemplateRenderer:
    return ChatTemplateRenderer(ChatTemplateConfig(tool_format="llama3-json"), llama_tokenizer())


def test_a_llama3_call_is_read_from_its_token_ids_with_and_without_the_python_tag():
    renderer = llama_renderer()
    call = '{"name": "calculator", "parameters": {"expression": "1+2"}}'
    ids = [PYTHON_TAG, *_chars(call), EOT]
    assert ids[:4] == [5, 97, 70, 30]  # <|python_tag|> { " n
    assert renderer.tokenizer("<|python_tag|>" + call, add_special_tokens=False)["input_ids"] == ids[:-1]
    turn = renderer.parse(ids)
    assert turn.text == "<|python_tag|>" + call and turn.parse_error is None
    assert turn.tool_calls == (ToolCall("calculator", {"expression": "1+2"}, "call_0"),)
    assert renderer.parse(_chars(call) + [EOT]).tool_calls == turn.tool_calls
    two = renderer.parse(_chars(call + '; {"name": "calculator", "arguments": {"expression": "3"}}') + [EOT])
    assert [c.arguments for c in two.tool_calls] == [{"expression": "1+2"}, {"expression": "3"}]
    answer = renderer.parse(_chars("The answer is 3.") + [EOT])
    assert answer.tool_calls == () and answer.parse_error is None


@pytest.mark.parametrize("text, error", [
    ('{"name": "calculator", "parameters": {"expression": "1+2"}', "tool call 1: not JSON"),
    ('{"name": 3, "parameters": {}}', 'expected {"name": str, "parameters": object}'),
    ('{"name": "calculator", "parameters": [1]}', 'expected {"name": str, "parameters": object}'),
    ('{"name": "calculator", "parameters": {}} and then some', "text after the JSON"),
    ("<|python_tag|>print(1)", "<|python_tag|> is not followed by a JSON tool call"),
])
def test_unreadable_llama3_calls_are_parse_errors(text, error):
    assert error in parse_llama3_json(text).parse_error


def test_a_llama3_call_inside_a_think_block_is_not_a_call():
    turn = parse_llama3_json('<think>{"name": "calculator", "parameters": {"expression": "1"}}</think>2')
    assert turn.tool_calls == () and turn.parse_error is None


def test_mistral_calls_are_read_after_their_marker():
    tok = chatml_tokenizer()
    renderer = ChatTemplateRenderer(ChatTemplateConfig(tool_format="mistral"), tok)
    text = 'Adding. [TOOL_CALLS][{"name": "calculator", "arguments": {"expression": "4*5"}}]'
    turn = renderer.parse(tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id])
    assert turn.text == text and turn.parse_error is None
    assert turn.tool_calls == (ToolCall("calculator", {"expression": "4*5"}, "call_0"),)
    assert parse_mistral("no calls here").tool_calls == ()
    assert "not JSON" in parse_mistral("[TOOL_CALLS][{oops").parse_error
    assert 'expected {"name": str, "arguments": object}' in parse_mistral('[TOOL_CALLS][{"arguments": {}}]').parse_error


def test_a_hermes_call_is_no_call_in_the_llama3_format():
    hermes = '<tool_call>{"name": "calculator", "arguments": {"expression": "1"}}</tool_call>'
    assert parse_llama3_json(hermes).tool_calls == ()


def test_an_unknown_tool_format_is_a_config_error(tmp_path, capsys):
    from grpo_run.cli.main import main
    from support.paths import EXAMPLES

    cfg = tmp_path / "run.toml"
    cfg.write_text((EXAMPLES / "calculator-tool.toml").read_text().replace(
        '[renderer]\nname = "tiny-chat"', '[renderer]\nname = "chat-template"\ntool_format = "llama"'))
    assert main(["check", str(cfg)]) != 0
    assert capsys.readouterr().err.strip() == (
        f"error: {cfg}: renderer.tool_format: must be in ('hermes', 'llama3-json', 'mistral') (got 'llama')")


def test_the_llama_bridge_is_the_ipython_turn_and_the_next_header():
    renderer = llama_renderer()
    messages = [{"role": "user", "content": "1+2"},
                {"role": "assistant", "content": '{"name": "calculator", "parameters": {"expression": "1+2"}}'}]
    bridge = renderer.bridge(messages, [{"role": "tool", "content": "3"}], TOOLS)
    ipython = _chars("ipython")
    assistant = _chars("assistant")
    assert bridge == [START, *ipython, END, *_chars("\n\n3"), EOT, START, *assistant, END, *_chars("\n\n")]


def test_a_llama3_tool_episode_has_golden_ids_and_masks():
    tok = llama_tokenizer()
    call = '{"name": "calculator", "parameters": {"expression": "12+7"}}'
    engine = ScriptedEngine(tok, [call, "19"], "assistant<|end_header_id|>")
    env = ScriptedEnv({"calculator": CalculatorTool(CalculatorConfig())})
    runner = EpisodeRunner(env, llama_renderer(), engine, EnvironmentSlot("scripted"),
                           SamplingParams(max_new_tokens=128))
    try:
        episode = asyncio.run(runner.run({"id": "r", "prompt": "12+7"}, 7, 0))
    finally:
        runner.close()
    header = lambda role: [START, *_chars(role), END, *_chars("\n\n")]  # noqa: E731
    prompt = [BOT, *header("system"), *_chars("Tools: calculator"), EOT, *header("user"), *_chars("12+7"), EOT,
              *header("assistant")]
    turn1 = [*_chars(call), EOT]
    bridge = [*header("ipython"), *_chars("19"), EOT, *header("assistant")]
    turn2 = [*_chars("19"), EOT]
    (seg,) = episode.segments
    assert list(seg.prompt_ids) == prompt
    assert list(seg.completion_ids) == turn1 + bridge + turn2
    assert list(seg.sampled) == [True] * len(turn1) + [False] * len(bridge) + [True] * len(turn2)
    assert all(math.isnan(x) for x in seg.logprobs[len(turn1):len(turn1) + len(bridge)])
    assert episode.text == "19" and episode.metrics["tool_calls"] == 1 and episode.metrics["bridge_fallbacks"] == 0
