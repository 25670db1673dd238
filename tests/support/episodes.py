"""Helpers of the episode tests: a ChatML test tokenizer with Hermes tool calls, a scripted
engine and a scripted environment."""

from __future__ import annotations

import asyncio
import string
import time
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from grpo_run import Action, Completion, EnvReset, EnvStep

IM_START, IM_END, PAD = "<|im_start|>", "<|im_end|>", "<|pad|>"

CHATML_TOOLS = (
    "{% if tools %}<|im_start|>system\n# Tools\n<tools>\n{% for t in tools %}{{ t.function.name }}\n{% endfor %}"
    "</tools><|im_end|>\n{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n</tool_response><|im_end|>\n"
    "{% elif m.role == 'assistant' and drop_history and not loop.last %}<|im_start|>assistant\n[earlier]<|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""A Qwen-like ChatML template: tools listed in a system turn, tool answers in ``<tool_response>``.
With ``drop_history`` it rewrites earlier assistant turns, as reasoning templates drop past
``<think>`` blocks: it is then not prefix-preserving."""


def chatml_tokenizer(drop_history: bool = False) -> Any:
    """One token per printable character, plus ``<|im_start|>``, ``<|im_end|>`` (eos), pad."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = [PAD, IM_END, IM_START, "<|unk|>"]
    vocab = {tok: i for i, tok in enumerate(specials + list(string.printable))}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<|unk|>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens(specials)
    template = CHATML_TOOLS.replace("drop_history", "true" if drop_history else "false")
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token=PAD, eos_token=IM_END, unk_token="<|unk|>",
                                   additional_special_tokens=[IM_START], chat_template=template)


class ScriptedEngine:
    """Answers turn ``t`` of any episode with ``script[t]`` (``t``: the assistant openers
    ``marker`` in the prompt, minus one), tokenised and closed by the eos id; cut at
    ``max_new_tokens`` ("length"). Log-prob of token j of a turn: -(j + 1) / 100."""

    def __init__(self, tokenizer: Any, script: Sequence[str], marker: str, *, version: int = 0) -> None:
        self.tokenizer = tokenizer
        self.script = list(script)
        self.marker = marker
        self.version = version
        self.calls: list[tuple[list[int], Any]] = []

    async def generate(self, prompts, params):
        out = []
        for prompt in prompts:
            self.calls.append((list(prompt), params))
            turn = self.tokenizer.decode(list(prompt), skip_special_tokens=False).count(self.marker) - 1
            text = self.script[min(turn, len(self.script) - 1)]
            ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) + [self.tokenizer.eos_token_id]
            finish = "stop"
            if len(ids) > params.max_new_tokens:
                ids, finish = ids[: params.max_new_tokens], "length"
            await asyncio.sleep(0)
            out.append([Completion(tuple(ids), tuple(-(j + 1) / 100 for j in range(len(ids))),
                                   self.tokenizer.decode(ids, skip_special_tokens=True), finish, self.version)])
        return out


class ScriptedEnv:
    """Answers each tool call with the calculator tool (or ``replies``); records resets and
    actions; ``fail`` = "raise" | "hang" | "garbage" breaks ``step``."""

    name = "scripted"

    class Config:
        pass

    def __init__(self, tools: Mapping[str, Any] | None = None, fail: str | None = None, hang_s: float = 30.0,
                 reward: float = 0.0) -> None:
        self.tools = dict(tools or {})
        self.fail = fail
        self.hang_s = hang_s
        self.reward = reward
        self.resets: list[int] = []
        self.actions: list[Action] = []
        self.closed = 0

    def reset(self, row: Mapping[str, Any], seed: int) -> EnvReset:
        self.resets.append(seed)
        return EnvReset([{"role": "user", "content": row["prompt"]}], [t.schema() for t in self.tools.values()], {})

    def step(self, state: Any, action: Action) -> EnvStep:
        self.actions.append(action)
        if self.fail == "raise":
            raise RuntimeError("the environment broke")
        if self.fail == "hang":
            time.sleep(self.hang_s)
        if self.fail == "garbage":
            return {"messages": "not an EnvStep"}  # type: ignore[return-value]
        if not action.turn.tool_calls:
            return EnvStep((), self.reward, True)
        replies = []
        for call in action.turn.tool_calls:
            try:
                answer = self.tools[call.name](call.arguments)
            except Exception as exc:
                answer = f"error: {exc}"
            replies.append({"role": "tool", "content": answer})
        return EnvStep(replies, self.reward, False)

    def close(self, state: Any) -> None:
        self.closed += 1


class BlockingAsyncEnv(ScriptedEnv):
    """An ``async def step`` that blocks the event loop with ``time.sleep``."""

    async def step(self, state: Any, action: Action) -> EnvStep:  # type: ignore[override]
        time.sleep(self.hang_s)
        return EnvStep((), 0.0, True)


class DrivenCalcEnv:
    """Drives its own conversation: asks ``row["prompt"]`` with the calculator tool, answers each
    call with the tool, and stops at a turn without calls (or ``max_calls``). ``rewrite``: the
    assistant messages go back reformatted (not as sampled); ``fail`` = "raise" | "hang" |
    "block" | "nothing" | "uncaught-over" | "garbage" breaks it. Reward: 1.0 when the last text
    equals ``row["ground_truth"]``."""

    name = "driven"

    @attrs.define
    class Config:
        pass

    def __init__(self, tool: Any, *, rewrite: bool = False, fail: str | None = None, hang_s: float = 30.0,
                 max_calls: int = 10, max_tokens: int | None = None) -> None:
        self.tool = tool
        self.rewrite = rewrite
        self.fail = fail
        self.hang_s = hang_s
        self.max_calls = max_calls
        self.max_tokens = max_tokens
        self.turns: list[Any] = []
        self.over: list[str] = []
        self.seeds: list[int] = []

    async def run_episode(self, row: Mapping[str, Any], seed: int, chat: Any) -> Any:
        from grpo_run import EpisodeOver, EpisodeResult

        self.seeds.append(seed)
        if self.fail == "nothing":
            return 1.0
        if self.fail == "hang":
            await asyncio.sleep(self.hang_s)
        if self.fail == "block":
            time.sleep(self.hang_s)
        messages: list[Any] = [{"role": "user", "content": row["prompt"]}]
        tools = [self.tool.schema()]
        turn, calls = None, 0
        for _ in range(self.max_calls):
            try:
                turn = await chat.complete(messages, tools, max_tokens=self.max_tokens)
            except EpisodeOver as exc:
                if self.fail == "uncaught-over":
                    raise
                self.over.append(str(exc))
                break
            self.turns.append(turn)
            calls += 1
            if self.fail == "raise":
                raise RuntimeError("the agent broke")
            messages.append({"role": "assistant", "content": " " + turn.text} if self.rewrite else turn.message())
            if not turn.turn.tool_calls:
                break
            messages.append({"role": "tool", "content": self.tool(turn.turn.tool_calls[0].arguments)})
        if self.fail == "garbage":
            return "no reward"
        text = turn.text if turn is not None else ""
        return EpisodeResult(float(text == row.get("ground_truth")), {"calls": float(calls)})
