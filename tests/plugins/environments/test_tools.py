"""The ``tools`` environment's worked examples (``demonstrations``): where they go in the
conversation, how the renderer shows them, and the errors a mistyped one gets."""

from __future__ import annotations

from grpo_run.cli.main import main
from grpo_run.plugins.environments.tools import ToolsEnvConfig, ToolsEnvironment
from grpo_run.plugins.renderers.hermes import ChatTemplateConfig, ChatTemplateRenderer
from grpo_run.plugins.tools.calculator import CalculatorConfig, CalculatorTool
from support.episodes import chatml_tokenizer
from support.paths import EXAMPLES

DEMO = [
    {"role": "user", "content": "3*4"},
    {"role": "assistant", "content": '<tool_call>{"name": "calculator", "arguments": {"expression": "3*4"}}</tool_call>'},
    {"role": "tool", "name": "calculator", "content": "12"},
    {"role": "assistant", "content": "12"},
]


def _env(**options):
    return ToolsEnvironment(ToolsEnvConfig(**options), {"calculator": CalculatorTool(CalculatorConfig())})


def test_demonstrations_sit_between_the_system_messages_and_the_question():
    env = _env(system_prompt="Use the calculator.", demonstrations=DEMO)
    row = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "5*6"}]}
    opening = env.reset(row, seed=0).messages
    assert [m["role"] for m in opening] == ["system", "system", "user", "assistant", "tool", "assistant", "user"]
    assert opening[2:6] == DEMO and opening[-1]["content"] == "5*6"
    opening[3]["content"] = "changed by an episode"
    assert env.reset(row, seed=1).messages[3] == DEMO[1]  # every episode gets its own copy


def test_the_renderer_shows_the_demonstrations_in_the_prompt_and_the_episode_goes_on_from_there():
    tok = chatml_tokenizer()
    renderer = ChatTemplateRenderer(ChatTemplateConfig(), tok)
    env = _env(demonstrations=DEMO)
    reset = env.reset({"prompt": "5*6"}, seed=0)
    text = tok.decode(renderer.render(reset.messages, reset.tools), skip_special_tokens=False)
    assert text.endswith(
        "<|im_start|>user\n3*4<|im_end|>\n<|im_start|>assistant\n<tool_call>{\"name\": \"calculator\", "
        "\"arguments\": {\"expression\": \"3*4\"}}</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n12\n"
        "</tool_response><|im_end|>\n<|im_start|>assistant\n12<|im_end|>\n"
        "<|im_start|>user\n5*6<|im_end|>\n<|im_start|>assistant\n")
    # the model's own call is run as in any episode, and the conversation bridges past the demonstrations
    call = '<tool_call>{"name": "calculator", "arguments": {"expression": "5*6"}}</tool_call>'
    turn = renderer.parse(tok(call, add_special_tokens=False)["input_ids"] + [tok.eos_token_id])
    from grpo_run import Action

    step = env.step(reset.state, Action(turn, "stop", 0))
    assert [m["content"] for m in step.messages] == ["30"] and not step.done
    messages = [*reset.messages, turn.message()]
    assert renderer.bridge(messages, step.messages, reset.tools) is not None


def test_a_mistyped_demonstration_names_its_entry(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text((EXAMPLES / "calculator-tool.toml").read_text().replace(
        'on_error = "message"',
        'on_error = "message"\ndemonstrations = [{role = "user", content = "1+1"}, {role = "bot", content = "2"}]'))
    assert main(["check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.toml: environment.demonstrations: entry 1: role 'bot' is not one of system, user, assistant, tool" in err
    assert "Traceback" not in err
    for entry, message in [('{role = "tool", content = 3}', "entry 0: content must be a string"),
                           ('{role = "user", tool_calls = []}', "entry 0: tool_calls must be a list, on an assistant message"),
                           ('{role = "assistant"}', "entry 0 has neither content nor tool_calls")]:
        bad.write_text((EXAMPLES / "calculator-tool.toml").read_text().replace(
            'on_error = "message"', f'on_error = "message"\ndemonstrations = [{entry}]'))
        assert main(["check", str(bad)]) == 2
        assert message in capsys.readouterr().err
