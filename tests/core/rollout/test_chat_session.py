"""Environments that drive their own conversation (``run_episode`` + a chat session): golden ids
and masks of a three-call episode, prefix extension vs a new segment, budgets, failures."""

from __future__ import annotations

import asyncio
import math

import pytest

from grpo_run import ChatTurn, EpisodeOver
from grpo_run.core.config.environment import EnvironmentSlot
from grpo_run.core.plugins.registry import component_class_problem
from grpo_run.core.plugins.families import ENVIRONMENT
from grpo_run.core.plugins.types import SamplingParams
from grpo_run.core.rollout.chat_session import PromptLimit
from grpo_run.core.rollout.episode_runner import EpisodeFailed, EpisodeRunner
from grpo_run.core.rollout.episodes import derive_seed
from grpo_run.plugins.models.sources import CHECKPOINTS_DIR
from grpo_run.plugins.renderers.hermes import ChatTemplateConfig, ChatTemplateRenderer
from grpo_run.plugins.renderers.tiny import TinyChatConfig, TinyChatRenderer
from grpo_run.plugins.tools.calculator import CalculatorConfig, CalculatorTool
from support.episodes import DrivenCalcEnv, ScriptedEngine, ScriptedEnv, chatml_tokenizer
from support.token_io import RecordingEngine, assert_token_in_token_out

# The char vocabulary: eos 1, <|user|> 2, <|assistant|> 3, "0".."9" = 5..14, "+" 15, "*" 17,
# "(" 19, ")" 20, " " 21, "a".."z" = 22..47 (as in test_episodes.py).
EOS, USER, ASSISTANT = 1, 2, 3
D = {str(d): 5 + d for d in range(10)}
C = {ch: 22 + i for i, ch in enumerate("abcdefghijklmnopqrstuvwxyz")}
CALC = [C[ch] for ch in "calculator"]
THREE_TURNS = ["calculator(12+7)", "calculator(19*2)", "38"]
ROW = {"id": "r", "prompt": "12+7", "ground_truth": "38"}


@pytest.fixture(scope="module")
def tiny_tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(CHECKPOINTS_DIR / "tiny-arithmetic")


def calc():
    return CalculatorTool(CalculatorConfig())


def runner_for(env, renderer, engine, *, budget=64, **settings):
    return EpisodeRunner(env, renderer, engine, EnvironmentSlot("driven", **settings), SamplingParams(max_new_tokens=budget))


def run(env, renderer, engine, *, seed=7, sample=0, budget=64, **settings):
    runner = runner_for(env, renderer, engine, budget=budget, **settings)
    try:
        return asyncio.run(runner.run(ROW, seed, sample))
    finally:
        runner.close()


def test_a_three_call_driven_episode_has_golden_ids_and_masks(tiny_tokenizer):
    engine = ScriptedEngine(tiny_tokenizer, THREE_TURNS, "<|assistant|>")
    env = DrivenCalcEnv(calc())
    episode = run(env, TinyChatRenderer(TinyChatConfig(), tiny_tokenizer), engine)

    prompt = [USER, D["1"], D["2"], 15, D["7"], ASSISTANT]  # <|user|>12+7<|assistant|>
    turn1 = CALC + [19, D["1"], D["2"], 15, D["7"], 20, EOS]  # calculator(12+7)<|eos|>
    ext1 = [USER, D["1"], D["9"], ASSISTANT]  # <|user|>19<|assistant|>: past the ids so far in the fresh render
    turn2 = CALC + [19, D["1"], D["9"], 17, D["2"], 20, EOS]  # calculator(19*2)<|eos|>
    ext2 = [USER, D["3"], D["8"], ASSISTANT]  # <|user|>38<|assistant|>
    turn3 = [D["3"], D["8"], EOS]  # 38<|eos|>
    assert len(episode.segments) == 1
    seg = episode.segments[0]
    assert list(seg.prompt_ids) == prompt
    assert list(seg.completion_ids) == turn1 + ext1 + turn2 + ext2 + turn3
    assert list(seg.sampled) == [True] * 17 + [False] * 4 + [True] * 17 + [False] * 4 + [True] * 3
    assert seg.roles[17:21] == ("environment",) * 4 and seg.roles[:17] == ("assistant",) * 17
    assert seg.logprobs[:17] == tuple(-(j + 1) / 100 for j in range(17))
    assert all(math.isnan(x) for x in seg.logprobs[17:21] + seg.logprobs[38:42])
    # Token-in/token-out: every call's prompt is exactly the ids so far.
    assert [call[0] for call in engine.calls] == [prompt, prompt + turn1 + ext1, prompt + turn1 + ext1 + turn2 + ext2]
    # The environment saw exactly the sampled ids, with the prompt counts an OpenAI client reports.
    assert [list(t.token_ids) for t in env.turns] == [turn1, turn2, turn3]
    assert [(t.prompt_tokens, t.completion_tokens) for t in env.turns] == [(6, 17), (27, 17), (48, 3)]
    assert episode.text == "38" and episode.env_reward == 1.0 and episode.finish_reason == "stop"
    assert episode.turns == 3
    assert episode.metrics["tool_calls"] == 2 and episode.metrics["env_tokens"] == 8
    assert episode.metrics["env/calls"] == 3 and episode.metrics["segments"] == 1
    # The same episode as the reset/step runner records it.
    stepped = run(ScriptedEnv({"calculator": calc()}), TinyChatRenderer(TinyChatConfig(), tiny_tokenizer),
                  ScriptedEngine(tiny_tokenizer, THREE_TURNS, "<|assistant|>"))
    assert stepped.segments == episode.segments


def test_a_conversation_that_does_not_extend_the_ids_so_far_starts_a_new_segment(tiny_tokenizer):
    engine = ScriptedEngine(tiny_tokenizer, THREE_TURNS, "<|assistant|>")
    env = DrivenCalcEnv(calc(), rewrite=True)  # sends its turns back as " " + text: not what was sampled
    episode = run(env, TinyChatRenderer(TinyChatConfig(), tiny_tokenizer), engine, budget=200)
    assert len(episode.segments) == 3 and episode.metrics["bridge_fallbacks"] == 2
    assert all(all(s.sampled) for s in episode.segments)  # no spliced ids: each segment is prompt + one turn
    second = episode.segments[1]
    # A fresh render of the rewritten conversation: "<|user|>12+7<|assistant|> calculator(12+7)<|eos|><|user|>19<|assistant|>"
    assert list(second.prompt_ids) == [USER, D["1"], D["2"], 15, D["7"], ASSISTANT, 21, *CALC, 19, D["1"], D["2"], 15,
                                       D["7"], 20, EOS, USER, D["1"], D["9"], ASSISTANT]
    assert [len(s.completion_ids) for s in episode.segments] == [17, 17, 3]


def test_a_chat_template_that_rewrites_history_starts_a_new_segment():
    tok = chatml_tokenizer(drop_history=True)
    call = '<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call>'
    engine = ScriptedEngine(tok, [call, "42"], "<|im_start|>assistant")
    episode = run(DrivenCalcEnv(calc()), ChatTemplateRenderer(ChatTemplateConfig(), tok), engine, budget=400)
    assert len(episode.segments) == 2 and episode.metrics["bridge_fallbacks"] == 1
    assert tok.decode(list(episode.segments[1].completion_ids), skip_special_tokens=False) == "42<|im_end|>"


def test_with_a_prefix_preserving_chat_template_the_newline_and_opener_are_masked():
    tok = chatml_tokenizer()
    call = '<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call>'
    engine = ScriptedEngine(tok, [call, "42"], "<|im_start|>assistant")
    episode = run(DrivenCalcEnv(calc()), ChatTemplateRenderer(ChatTemplateConfig(), tok), engine, budget=400)
    (seg,) = episode.segments
    env_text = tok.decode([i for i, s in zip(seg.completion_ids, seg.sampled) if not s], skip_special_tokens=False)
    assert env_text == "\n<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    assert tok.decode([i for i, s in zip(seg.completion_ids, seg.sampled) if s], skip_special_tokens=False) == (
        call + "<|im_end|>42<|im_end|>")


def test_max_turns_ends_the_episode_with_a_clear_reason(tiny_tokenizer):
    engine = ScriptedEngine(tiny_tokenizer, ["calculator(1+1)"], "<|assistant|>")  # it calls forever
    env = DrivenCalcEnv(calc())
    episode = run(env, TinyChatRenderer(TinyChatConfig(), tiny_tokenizer), engine, budget=400, max_turns=2)
    assert episode.turns == 2 and len(engine.calls) == 2 and episode.finish_reason == "stop"
    assert env.over == ["the episode can take no more turns: environment.max_turns = 2 calls were made"]


def test_a_turn_cut_at_the_length_limit_ends_the_episode_and_carries_no_tool_calls(tiny_tokenizer):
    engine = ScriptedEngine(tiny_tokenizer, THREE_TURNS, "<|assistant|>")
    env = DrivenCalcEnv(calc())
    episode = run(env, TinyChatRenderer(TinyChatConfig(), tiny_tokenizer), engine, max_tokens_per_turn=16)
    (turn,) = env.turns
    # "calculator(12+7)" is complete in the 16 ids, but the turn did not stop: its call must not run.
    assert turn.finish_reason == "length" and turn.turn.tool_calls == () and turn.text == "calculator(12+7)"
    assert episode.finish_reason == "length" and episode.turns == 1 and len(episode.token_ids) == 16
    assert env.over == []  # it stopped by itself: the turn carried no call


class TwoShortCalls(DrivenCalcEnv):
    """Asks twice for at most 5 tokens, then once more with no cap."""

    async def run_episode(self, row, seed, chat):
        messages = [{"role": "user", "content": row["prompt"]}]
        for cap in (5, 5, None):
            turn = await chat.complete(messages, max_tokens=cap)
            self.turns.append(turn)
            messages += [turn.message(), {"role": "user", "content": "go on"}]
        return 0.0


def test_the_callers_own_max_tokens_cuts_a_turn_without_ending_the_episode(tiny_tokenizer):
    engine = ScriptedEngine(tiny_tokenizer, ["calculator(1+1)", "2", "3"], "<|assistant|>")
    env = TwoShortCalls(calc())
    episode = run(env, TinyChatRenderer(TinyChatConfig(), tiny_tokenizer), engine, budget=200)
    assert [t.finish_reason for t in env.turns] == ["length", "stop", "stop"]
    assert [p.max_new_tokens for _, p in engine.calls] == [5, 5, 200 - (5 + 8 + 2 + 7)]
    # 5 cut ids; <|eos|><|user|>go on<|assistant|> (8, masked); 2<|eos|> (2); <|user|>go on<|assistant|> (7)
    assert episode.finish_reason == "stop" and episode.turns == 3 and len(episode.segments) == 1
    # The cut turn's missing eos comes with the next render, masked.
    assert episode.segments[0].sampled[5] is False and episode.segments[0].completion_ids[5] == EOS


def test_the_total_budget_counts_the_appended_ids(tiny_tokenizer):
    engine = ScriptedEngine(tiny_tokenizer, THREE_TURNS, "<|assistant|>")
    env = DrivenCalcEnv(calc())
    # 17 + 4 + 17 = 38 ids; the second answer's 4 ids would reach 42 > 40: no third call.
    episode = run(env, TinyChatRenderer(TinyChatConfig(), tiny_tokenizer), engine, budget=40)
    assert episode.turns == 2 and len(episode.token_ids) == 38
    assert env.over == ["the episode can take no more turns: the conversation no longer fits the episode's 40 "
                        "tokens (rollout.response_length)"]


def test_group_members_share_the_seed_and_their_calls_are_batched_with_derived_seeds(tiny_tokenizer):
    engine = ScriptedEngine(tiny_tokenizer, THREE_TURNS, "<|assistant|>")
    env = DrivenCalcEnv(calc())
    runner = runner_for(env, TinyChatRenderer(TinyChatConfig(), tiny_tokenizer), engine)

    async def group():
        for _ in range(3):
            runner.batcher.enter()
        return await asyncio.gather(*(runner.run(ROW, 99, g, reserved=True) for g in range(3)))

    asyncio.run(group())
    runner.close()
    assert env.seeds == [99, 99, 99] and runner.batcher.calls == 3
    seeds = [params.seed for _, params in engine.calls]
    assert seeds == [derive_seed(*(k for g in range(3) for k in (99, g, t))) for t in range(3) for _ in range(3)]


@pytest.mark.parametrize("fail, match, timed_out", [
    ("raise", "environment run_episode raised RuntimeError: the agent broke", False),
    ("hang", "the environment's own time in the episode passed environment.episode_timeout_s = 0.5 ", True),
    ("block", r"environment run_episode held the event loop for \d+\.\d s without awaiting", True),
    ("nothing", r"run_episode sampled no turn \(chat.complete was never called\)", False),
    ("uncaught-over", "raised EpisodeOver: the episode can take no more turns: environment.max_turns = 1", False),
    ("garbage", "run_episode returned 'no reward', not an EpisodeResult", False),
])
def test_a_failing_driven_environment_fails_its_episode_with_the_reason(tiny_tokenizer, fail, match, timed_out):
    engine = ScriptedEngine(tiny_tokenizer, ["calculator(1+1)"], "<|assistant|>")
    env = DrivenCalcEnv(calc(), fail=fail, hang_s=0.8 if fail == "block" else 30.0)
    with pytest.raises(EpisodeFailed, match=match) as info:
        run(env, TinyChatRenderer(TinyChatConfig(), tiny_tokenizer), engine, max_turns=1, step_timeout_s=0.3,
            episode_timeout_s=5.0 if fail == "block" else 0.5)
    assert info.value.timed_out == timed_out


def test_a_driven_environment_needs_no_reset_or_step_but_an_async_run_episode():
    assert component_class_problem(DrivenCalcEnv, ENVIRONMENT) is None

    class SyncDriven(DrivenCalcEnv):
        def run_episode(self, row, seed, chat):  # type: ignore[override]
            return 1.0

    assert component_class_problem(SyncDriven, ENVIRONMENT) == "its 'run_episode' must be an async def"

    class Neither:
        name = "neither"
        Config = DrivenCalcEnv.Config

    assert "lacks 'reset', 'step'" in component_class_problem(Neither, ENVIRONMENT)


class ParallelEnv:
    """Asks the question, then sends ``branches`` (follow-ups after that history) at once with
    ``asyncio.gather``, as agent frameworks do for parallel sub-queries; records what each got."""

    name = "parallel"

    class Config:
        pass

    def __init__(self, branches, *, calls=1):
        self.branches = branches
        self.calls = calls
        self.got = []

    async def run_episode(self, row, seed, chat):
        from grpo_run import EpisodeOver, EpisodeResult

        history = [{"role": "user", "content": row["prompt"]}]
        first = await chat.complete(history)
        history.append(first.message())

        async def one(extra):
            try:
                return await chat.complete(history + extra)
            except EpisodeOver as exc:
                return exc

        self.got = await asyncio.gather(*(one(extra) for extra in self.branches * self.calls))
        return EpisodeResult(1.0)


SUBQUERY = [{"role": "user", "content": "1+1"}]
EXTENDS_IT = [*SUBQUERY, {"role": "assistant", "content": "2"}, {"role": "user", "content": "2+2"}]


@pytest.mark.parametrize("branches", [
    [SUBQUERY, SUBQUERY],  # the same sub-query twice: each turn is recorded, none lost
    [SUBQUERY, EXTENDS_IT],  # the second renders as an extension of the first: never spliced after it
    [SUBQUERY, [{"role": "user", "content": "2+2"}], EXTENDS_IT],
], ids=["same", "extending", "three"])
def test_concurrent_calls_of_one_episode_are_each_recorded_after_the_ids_they_were_sampled_after(
        tiny_tokenizer, branches):
    engine = RecordingEngine(ScriptedEngine(tiny_tokenizer, ["5", "6", "7", "8"], "<|assistant|>"))
    env = ParallelEnv(branches)
    episode = run(env, TinyChatRenderer(TinyChatConfig(), tiny_tokenizer), engine, max_turns=8)
    assert len(engine.records) == 1 + len(branches) == episode.turns
    assert all(isinstance(turn, ChatTurn) for turn in env.got)
    assert_token_in_token_out(episode, engine.records)
    assert episode.metrics["segments"] == len(episode.segments) >= 2  # a branch that does not extend: a new segment


def test_concurrent_calls_count_against_max_turns_when_they_start(tiny_tokenizer):
    engine = RecordingEngine(ScriptedEngine(tiny_tokenizer, ["5"], "<|assistant|>"))
    env = ParallelEnv([SUBQUERY], calls=1000)
    episode = run(env, TinyChatRenderer(TinyChatConfig(), tiny_tokenizer), engine, max_turns=3)
    assert len(engine.records) == episode.turns == 3  # 1000 at once with max_turns = 3: three turns sampled
    over = [got for got in env.got if isinstance(got, EpisodeOver)]
    assert len(over) == 998 and str(over[0]) == (
        "the episode can take no more turns: environment.max_turns = 3 calls were made")
    assert_token_in_token_out(episode, engine.records)


def test_the_token_budget_holds_under_concurrent_calls(tiny_tokenizer):
    engine = RecordingEngine(ScriptedEngine(tiny_tokenizer, ["5555"], "<|assistant|>"))  # 5 ids a turn
    env = ParallelEnv([SUBQUERY], calls=50)
    episode = run(env, TinyChatRenderer(TinyChatConfig(), tiny_tokenizer), engine, budget=24, max_turns=100)
    assert sum(len(ids) for _, ids in engine.records) <= 24 and episode.finish_reason == "length"
    assert_token_in_token_out(episode, engine.records)


class Renders(TinyChatRenderer):
    """Counts the characters it was asked to render."""

    rendered: list[int] = []

    def render(self, messages, tools):
        self.rendered.append(sum(len(m["content"]) for m in messages))
        return super().render(messages, tools)


@pytest.mark.parametrize("chars, match", [
    (100_000, r"every call was refused: the conversation \(100000 characters\) cannot fit the episode's 96 ids"),
    (200, r"every call was refused: the first prompt \(202 ids\) is longer than 96 ids \(the limit\)"),
])
def test_a_first_prompt_past_the_limit_is_refused_before_sampling(tiny_tokenizer, chars, match):
    engine = RecordingEngine(ScriptedEngine(tiny_tokenizer, ["5"], "<|assistant|>"))
    renderer = Renders(TinyChatConfig(), tiny_tokenizer)
    Renders.rendered = []
    runner = EpisodeRunner(DrivenCalcEnv(calc()), renderer, engine, EnvironmentSlot("driven"),
                           SamplingParams(max_new_tokens=32),
                           prompt_limit=PromptLimit.of(96, "the limit", tiny_tokenizer))
    try:
        with pytest.raises(EpisodeFailed, match=f"run_episode sampled no turn \\({match}"):
            asyncio.run(runner.run({"id": "r", "prompt": "7" * chars}, 7, 0))
    finally:
        runner.close()
    assert engine.records == []
    assert Renders.rendered == ([] if chars == 100_000 else [chars])  # 100 KB: refused before tokenising it
