"""The episode runner, scripted: golden ids and masks of a three-turn tool episode on the shipped
char model's format, the bridge and its fallback, the length rule, errors as messages, seeds, and
what reaches the learner (packing, the engine log-prob guard)."""

from __future__ import annotations

import asyncio
import math

import attrs

import pytest
import torch

from grpo_run.core.config.environment import EnvironmentSlot
from grpo_run.core.learner.offpolicy import sampled_engine_logprobs
from grpo_run.core.plugins.types import SamplingParams
from grpo_run.core.rollout.episode_runner import EpisodeFailed, EpisodeRunner
from grpo_run.core.rollout.episodes import combine_rewards, derive_seed
from grpo_run.core.rollout.packing import pack_sequences
from grpo_run.core.rollout.sequences import episode_sequences
from grpo_run.plugins.models.sources import CHECKPOINTS_DIR
from grpo_run.plugins.renderers.hermes import ChatTemplateRenderer, ChatTemplateConfig
from grpo_run.plugins.renderers.tiny import TinyChatConfig, TinyChatRenderer
from grpo_run.plugins.tools.calculator import CalculatorConfig, CalculatorTool
from support.episodes import BlockingAsyncEnv, ScriptedEngine, ScriptedEnv, chatml_tokenizer

# The char vocabulary (grpo_run/plugins/models/char_tokenizer.py): pad 0, eos 1, <|user|> 2,
# <|assistant|> 3, unk 4, then "0".."9" = 5..14, "+" 15, "-" 16, "*" 17, "=" 18, "(" 19, ")" 20,
# " " 21, "a".."z" = 22..47.
EOS, USER, ASSISTANT = 1, 2, 3
D = {str(d): 5 + d for d in range(10)}
C = {ch: 22 + i for i, ch in enumerate("abcdefghijklmnopqrstuvwxyz")}
CALC = [C[ch] for ch in "calculator"]  # 24 22 33 24 42 33 22 41 36 39


@pytest.fixture(scope="module")
def tiny_tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(CHECKPOINTS_DIR / "tiny-arithmetic")


def run(env, renderer, engine, *, seed=7, sample=0, budget=64, **settings):
    runner = EpisodeRunner(env, renderer, engine, EnvironmentSlot("scripted", **settings), SamplingParams(max_new_tokens=budget))
    try:
        return asyncio.run(runner.run({"id": "r", "prompt": "12+7"}, seed, sample))
    finally:
        runner.close()


def calc_env(**kw):
    return ScriptedEnv({"calculator": CalculatorTool(CalculatorConfig())}, **kw)


THREE_TURNS = ["calculator(12+7)", "calculator(19*2)", "38"]


def test_a_three_turn_tool_episode_has_golden_ids_and_masks(tiny_tokenizer):
    engine = ScriptedEngine(tiny_tokenizer, THREE_TURNS, "<|assistant|>")
    env = calc_env()
    episode = run(env, TinyChatRenderer(TinyChatConfig(), tiny_tokenizer), engine)

    prompt = [USER, D["1"], D["2"], 15, D["7"], ASSISTANT]  # <|user|>12+7<|assistant|>
    turn1 = CALC + [19, D["1"], D["2"], 15, D["7"], 20, EOS]  # calculator(12+7)<|eos|>
    bridge1 = [USER, D["1"], D["9"], ASSISTANT]  # <|user|>19<|assistant|>: the tool's answer, the next opener
    turn2 = CALC + [19, D["1"], D["9"], 17, D["2"], 20, EOS]  # calculator(19*2)<|eos|>
    bridge2 = [USER, D["3"], D["8"], ASSISTANT]  # <|user|>38<|assistant|>
    turn3 = [D["3"], D["8"], EOS]  # 38<|eos|>
    assert len(episode.segments) == 1
    seg = episode.segments[0]
    assert list(seg.prompt_ids) == prompt
    assert list(seg.completion_ids) == turn1 + bridge1 + turn2 + bridge2 + turn3
    assert list(seg.sampled) == [True] * 17 + [False] * 4 + [True] * 17 + [False] * 4 + [True] * 3
    # The engine's log-probs on sampled ids, NaN on the environment's.
    assert seg.logprobs[:17] == tuple(-(j + 1) / 100 for j in range(17))
    assert all(math.isnan(x) for x in seg.logprobs[17:21])
    # Token-in/token-out: every turn's prompt is exactly the ids so far.
    assert [call[0] for call in engine.calls] == [prompt, prompt + turn1 + bridge1,
                                                  prompt + turn1 + bridge1 + turn2 + bridge2]
    assert episode.text == "38" and episode.turns == 3 and episode.finish_reason == "stop"
    assert [m["role"] for m in episode.messages] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert episode.metrics["tool_calls"] == 2 and episode.metrics["env_tokens"] == 8
    assert env.closed == 1


def test_masked_positions_never_reach_the_loss(tiny_tokenizer):
    engine = ScriptedEngine(tiny_tokenizer, THREE_TURNS, "<|assistant|>")
    episode = run(calc_env(), TinyChatRenderer(TinyChatConfig(), tiny_tokenizer), engine)
    seqs = episode_sequences(episode, advantage=0.5, loss_mask=True, first_id=0)
    assert math.isnan(seqs[0].engine_logprobs[17])  # the NaN is in the rollout record ...
    batch = pack_sequences(seqs, pack_length=128, pad_token_id=0)
    mask = batch.completion_mask[0]
    env_positions = [6 + 17 + k for k in range(4)] + [6 + 38 + k for k in range(4)]
    assert not mask[env_positions].any() and not mask[:6].any()  # env ids and the prompt: out
    assert int(mask.sum()) == 37  # the loss denominator counts sampled tokens only
    # ... but never in a packed tensor: 0 off the mask, the engine's value on it.
    assert torch.isfinite(batch.engine_logprobs).all()
    assert float(batch.engine_logprobs[0, 6]) == pytest.approx(-0.01)
    assert (batch.advantages[0][~mask] == 0).all() and (batch.advantages[0][mask] == 0.5).all()
    # Trained environment tokens carry NaN onto loss positions: the learner refuses to read them
    # as engine log-probs (ratio, mismatch weights).
    trained = episode_sequences(attrs.evolve(episode, train_on_env_tokens=True), 0.5, True, 0)
    packed = pack_sequences(trained, 128, 0)
    assert int(packed.completion_mask.sum()) == 45
    with pytest.raises(RuntimeError, match="8 loss tokens have no engine log-prob"):
        sampled_engine_logprobs(packed.engine_logprobs, packed.completion_mask)
    assert torch.isfinite(sampled_engine_logprobs(batch.engine_logprobs, batch.completion_mask)).all()


def test_a_turn_cut_at_the_length_limit_ends_the_episode_and_its_calls_never_run(tiny_tokenizer):
    engine = ScriptedEngine(tiny_tokenizer, THREE_TURNS, "<|assistant|>")
    env = calc_env()
    episode = run(env, TinyChatRenderer(TinyChatConfig(), tiny_tokenizer), engine, max_tokens_per_turn=10)
    assert episode.finish_reason == "length" and episode.turns == 1
    assert env.actions == []  # step never saw the truncated turn: its call did not run
    assert list(episode.segments[0].completion_ids) == CALC  # 10 ids, no eos


def test_the_total_budget_counts_environment_tokens(tiny_tokenizer):
    engine = ScriptedEngine(tiny_tokenizer, THREE_TURNS, "<|assistant|>")
    # 17 + 4 + 17 = 38 ids; the second answer's bridge (4) would reach 42 > 40: the episode ends.
    episode = run(calc_env(), TinyChatRenderer(TinyChatConfig(), tiny_tokenizer), engine, budget=40)
    assert episode.finish_reason == "length" and episode.turns == 2
    assert len(episode.token_ids) == 38


def test_tool_errors_go_back_to_the_model_as_messages(tiny_tokenizer):
    tok = chatml_tokenizer()
    engine = ScriptedEngine(tok, ['<tool_call>{"name": "calculator", "arguments": {"expression": "1/0"}}</tool_call>',
                                  "no"], "<|im_start|>assistant")
    episode = run(calc_env(), ChatTemplateRenderer(ChatTemplateConfig(), tok), engine, budget=400)
    assert episode.messages[2] == {"role": "tool", "content": "error: division by zero"}
    seg = episode.segments[0]
    env_text = tok.decode([i for i, s in zip(seg.completion_ids, seg.sampled) if not s], skip_special_tokens=False)
    # The scaffolding is masked with the answer: the newline after <|im_end|>, the user header,
    # the <tool_response> wrapper and the next assistant opener.
    assert env_text == ("\n<|im_start|>user\n<tool_response>\nerror: division by zero\n</tool_response><|im_end|>\n"
                        "<|im_start|>assistant\n")
    assert episode.turns == 2 and episode.text == "no"


def test_a_template_that_rewrites_history_starts_a_new_segment():
    tok = chatml_tokenizer(drop_history=True)
    call = '<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call>'
    engine = ScriptedEngine(tok, [call, "42"], "<|im_start|>assistant")
    episode = run(calc_env(), ChatTemplateRenderer(ChatTemplateConfig(), tok), engine, budget=400)
    assert len(episode.segments) == 2 and episode.metrics["bridge_fallbacks"] == 1
    first, second = episode.segments
    assert all(first.sampled)  # the first segment ends with the sampled turn: no spliced ids
    # The second segment's prompt is a fresh render of the whole conversation (history rewritten).
    assert tok.decode(list(second.prompt_ids), skip_special_tokens=False).endswith(
        "<|im_start|>assistant\n[earlier]<|im_end|>\n<|im_start|>user\n<tool_response>\n42\n</tool_response>"
        "<|im_end|>\n<|im_start|>assistant\n")
    assert tok.decode(list(second.completion_ids), skip_special_tokens=False) == "42<|im_end|>"
    seqs = episode_sequences(episode, advantage=-1.5, loss_mask=True, first_id=3)
    assert [s.seq_id for s in seqs] == [3, 4] and {s.advantage for s in seqs} == {-1.5}


def test_group_members_share_the_initial_state_and_their_turns_are_batched_with_derived_seeds(tiny_tokenizer):
    def group():
        engine = ScriptedEngine(tiny_tokenizer, THREE_TURNS, "<|assistant|>")
        env = calc_env()
        runner = EpisodeRunner(env, TinyChatRenderer(TinyChatConfig(), tiny_tokenizer), engine,
                               EnvironmentSlot("scripted"), SamplingParams(max_new_tokens=64))

        async def episodes():
            return await asyncio.gather(*(runner.run({"id": "r", "prompt": "12+7"}, 99, g) for g in range(3)))

        asyncio.run(episodes())
        runner.close()
        return env, engine, runner

    env, engine, runner = group()
    assert env.resets == [99, 99, 99]
    # Turn t of the three episodes goes to the engine as one call (they wait for each other's
    # environment steps), seeded from the (group seed, sample, turn) keys of its members.
    assert runner.batcher.calls == 3 and [len(p) for p, _ in engine.calls] == [6] * 3 + [27] * 3 + [48] * 3
    seeds = [params.seed for _, params in engine.calls]
    assert seeds == [derive_seed(*(k for g in range(3) for k in (99, g, t))) for t in range(3) for _ in range(3)]
    assert len(set(seeds)) == 3
    _, again, _ = group()
    assert [(p, params) for p, params in again.calls] == [(p, params) for p, params in engine.calls]


@pytest.mark.parametrize("fail, match", [
    ("raise", "environment step raised RuntimeError: the environment broke"),
    ("hang", "environment step ran longer than environment.step_timeout_s = 0.3"),
    ("garbage", "not an EnvStep"),
])
def test_a_failing_environment_fails_the_episode_with_a_reason(tiny_tokenizer, fail, match):
    engine = ScriptedEngine(tiny_tokenizer, THREE_TURNS, "<|assistant|>")
    env = calc_env(fail=fail, hang_s=5.0)
    with pytest.raises(EpisodeFailed, match=match):
        run(env, TinyChatRenderer(TinyChatConfig(), tiny_tokenizer), engine, step_timeout_s=0.3)


def test_traces_show_the_turns_with_their_roles_and_masks(tiny_tokenizer):
    from grpo_run.core.loop.traces import episode_spans

    engine = ScriptedEngine(tiny_tokenizer, THREE_TURNS, "<|assistant|>")
    episode = run(calc_env(), TinyChatRenderer(TinyChatConfig(), tiny_tokenizer), engine)
    decode = lambda ids: tiny_tokenizer.decode(list(ids), skip_special_tokens=False)  # noqa: E731
    assert [(s["role"], s["trained"], s["text"]) for s in episode_spans(episode, decode)] == [
        ("assistant", True, "calculator(12+7)<|eos|>"),
        ("environment", False, "<|user|>19<|assistant|>"),
        ("assistant", True, "calculator(19*2)<|eos|>"),
        ("environment", False, "<|user|>38<|assistant|>"),
        ("assistant", True, "38<|eos|>"),
    ]


@pytest.mark.parametrize("how, expected", [("last", 2.0), ("sum", 3.5), ("discounted", 1.0 + 0.5 * 0.5 + 0.25 * 2.0)])
def test_per_turn_rewards_combine(how, expected):
    assert combine_rewards([1.0, 0.5, 2.0], how, discount=0.5) == pytest.approx(expected, abs=1e-12)
    assert combine_rewards([], how) == 0.0


def test_an_async_environment_that_blocks_the_event_loop_fails_its_episode_with_the_reason(tiny_tokenizer):
    engine = ScriptedEngine(tiny_tokenizer, THREE_TURNS, "<|assistant|>")
    env = BlockingAsyncEnv(hang_s=0.6)
    with pytest.raises(EpisodeFailed, match=r"environment step held the event loop for \d+\.\d s without awaiting"):
        run(env, TinyChatRenderer(TinyChatConfig(), tiny_tokenizer), engine, step_timeout_s=0.3)
