"""The built-in renderers: Hermes tool calls read from token ids, the char model's call syntax,
and a bridge that is kept only when a fresh render agrees with it."""

from __future__ import annotations

import pytest

from grpo_run import ToolCall
from grpo_run.plugins.models.sources import CHECKPOINTS_DIR
from grpo_run.plugins.renderers.hermes import ChatTemplateConfig, ChatTemplateRenderer, parse_hermes
from grpo_run.plugins.renderers.tiny import TinyChatConfig, TinyChatRenderer
from grpo_run.plugins.tools.calculator import CalculatorConfig, CalculatorTool
from support.episodes import chatml_tokenizer

TOOLS = [CalculatorTool(CalculatorConfig()).schema()]


def test_hermes_calls_are_read_from_token_ids():
    tok = chatml_tokenizer()
    renderer = ChatTemplateRenderer(ChatTemplateConfig(), tok)
    text = 'Let me add. <tool_call>\n{"name": "calculator", "arguments": {"expression": "1+2"}}\n</tool_call>'
    ids = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    turn = renderer.parse(ids)
    assert turn.text == text and turn.parse_error is None
    assert turn.tool_calls == (ToolCall("calculator", {"expression": "1+2"}, "call_0"),)


@pytest.mark.parametrize("text, error", [
    ("<tool_call>{not json}</tool_call>", "tool call 1: not JSON"),
    ('<tool_call>{"name": 3}</tool_call>', 'expected {"name": str, "arguments": object}'),
    ('<tool_call>{"name": "calculator", "arguments": {}}', "a <tool_call> is not closed"),
])
def test_unreadable_calls_are_parse_errors(text, error):
    assert error in parse_hermes(text).parse_error


def test_calls_inside_a_think_block_are_not_calls():
    thought = '<think>maybe <tool_call>{"name": "python", "arguments": {"code": "1"}}</tool_call></think>done'
    assert parse_hermes(thought).tool_calls == ()
    assert parse_hermes("<think>still thinking <tool_call>").tool_calls == ()


def test_string_arguments_are_decoded():
    turn = parse_hermes('<tool_call>{"name": "calculator", "arguments": "{\\"expression\\": \\"2\\"}"}</tool_call>')
    assert turn.tool_calls[0].arguments == {"expression": "2"}


def test_the_bridge_equals_a_fresh_render_and_says_cannot_when_history_is_rewritten():
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "call"}]
    new = [{"role": "tool", "content": "3"}]
    tok = chatml_tokenizer()
    renderer = ChatTemplateRenderer(ChatTemplateConfig(), tok)
    bridge = renderer.bridge(messages, new, TOOLS)
    head = tok.apply_chat_template(messages, tools=TOOLS, tokenize=False)
    cut = head.rindex("<|im_end|>") + len("<|im_end|>")
    assert tok(head[:cut], add_special_tokens=False)["input_ids"] + bridge == renderer.render(messages + new, TOOLS)
    assert tok.decode(bridge, skip_special_tokens=False) == (
        "\n<|im_start|>user\n<tool_response>\n3\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
    rewriting = ChatTemplateRenderer(ChatTemplateConfig(), chatml_tokenizer(drop_history=True))
    assert rewriting.bridge(messages, new, TOOLS) is None


def test_the_char_model_calls_a_tool_with_name_and_argument():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(CHECKPOINTS_DIR / "tiny-arithmetic")
    renderer = TinyChatRenderer(TinyChatConfig(), tok)
    assert tok.decode(renderer.render([{"role": "user", "content": "12*34"}], TOOLS),
                      skip_special_tokens=False) == "<|user|>12*34<|assistant|>"
    call = renderer.parse(tok("calculator(12*34)", add_special_tokens=False)["input_ids"] + [tok.eos_token_id])
    assert call.tool_calls == (ToolCall("calculator", {"expression": "12*34"}, "call_0"),)
    assert renderer.parse(tok("408", add_special_tokens=False)["input_ids"]).tool_calls == ()
    assert renderer.parse(tok("python(1)", add_special_tokens=False)["input_ids"]).parse_error == "no tool named 'python'"
