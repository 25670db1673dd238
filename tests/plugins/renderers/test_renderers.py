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


def test_the_chatml_tools_template_shows_tools_and_writes_calls_the_renderer_reads(tmp_path):
    """``chat_template = "chatml-tools"``: for a model whose own template drops tools (SmolLM2).
    A demonstration's structured ``tool_calls`` render as the markup ``parse`` reads back, and
    tool answers bridge like any ChatML template's."""
    tok = chatml_tokenizer()
    renderer = ChatTemplateRenderer(ChatTemplateConfig(chat_template="chatml-tools"), tok)
    call = {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "3*4"}}}
    messages = [{"role": "system", "content": "Be exact."}, {"role": "user", "content": "3*4?"},
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "name": "calculator", "content": "12"}]
    text = tok.decode(renderer.render(messages, TOOLS), skip_special_tokens=False)
    assert text.startswith("<|im_start|>system\nBe exact.\n\nTools you can call:\n<tools>\n{\"type\": \"function\"")
    assert text.endswith(
        "<|im_start|>user\n3*4?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"calculator\", "
        "\"arguments\": {\"expression\": \"3*4\"}}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n12\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
    shown = text.split("<|im_start|>assistant\n")[1].split("<|im_end|>")[0]
    assert renderer.parse_text(shown).tool_calls == (ToolCall("calculator", {"expression": "3*4"}, "call_0"),)
    # a sampled turn (markup as text) and two tool answers: the bridge equals a fresh render
    turn = [messages[1], {"role": "assistant", "content": shown}]
    answers = [{"role": "tool", "content": "12"}, {"role": "tool", "content": "error: x"}]
    bridge = renderer.bridge(turn, answers, TOOLS)
    head = renderer._template(turn, TOOLS, generation_prompt=False)
    head = head[: head.rindex("<|im_end|>") + len("<|im_end|>")]
    assert renderer._encode(head) + bridge == renderer.render(turn + answers, TOOLS)
    assert tok.decode(bridge, skip_special_tokens=False) == (
        "\n<|im_start|>user\n<tool_response>\n12\n</tool_response>\n<tool_response>\nerror: x\n</tool_response>"
        "<|im_end|>\n<|im_start|>assistant\n")
    # without tools it is plain ChatML; a file works the same as the built-in name
    assert tok.decode(renderer.render(messages[:2], []), skip_special_tokens=False) == (
        "<|im_start|>system\nBe exact.<|im_end|>\n<|im_start|>user\n3*4?<|im_end|>\n<|im_start|>assistant\n")
    from grpo_run.plugins.renderers.chatml_tools import CHATML_TOOLS

    (tmp_path / "t.jinja").write_text(CHATML_TOOLS)
    from_file = ChatTemplateRenderer(ChatTemplateConfig(chat_template=str(tmp_path / "t.jinja")), tok)
    assert from_file.render(messages, TOOLS) == renderer.render(messages, TOOLS)


def test_a_template_that_drops_tools_is_reported_once():
    from structlog.testing import capture_logs

    tok = chatml_tokenizer()
    tok.chat_template = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    renderer = ChatTemplateRenderer(ChatTemplateConfig(), tok)
    with capture_logs() as logs:
        renderer.render([{"role": "user", "content": "hi"}], TOOLS)
        renderer.render([{"role": "user", "content": "hi"}], TOOLS)
    assert [e["event"] for e in logs] == ["chat_template_drops_tools"] and logs[0]["tools"] == ["calculator"]
    with capture_logs() as logs:
        ChatTemplateRenderer(ChatTemplateConfig(), chatml_tokenizer()).render([{"role": "user", "content": "hi"}], TOOLS)
    assert logs == []


def test_an_unknown_chat_template_is_a_config_error():
    import attrs as _attrs

    with pytest.raises(ValueError, match="'chatml-tool' is neither a built-in template \\(chatml-tools\\) nor a file"):
        ChatTemplateConfig(chat_template="chatml-tool")
    assert _attrs.fields(ChatTemplateConfig).chat_template.default == ""
