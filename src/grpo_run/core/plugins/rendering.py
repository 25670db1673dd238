"""A base for renderers over the tokenizer's chat template: rendering through
``apply_chat_template`` and a bridge checked against a fresh render of the whole conversation.

Public as ``grpo_run.TemplateRenderer``: the built-in renderers subclass it, and so may a
plugin's; a subclass only reads tool calls out of a turn's text (:meth:`parse_text`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grpo_run.core.plugins.episodes import Message, ParsedTurn, ToolSchema


class TemplateRenderer:
    """``render`` and ``bridge`` over ``apply_chat_template``, ``parse`` through the text;
    subclasses read tool calls (:meth:`parse_text`) and may override any part."""

    chat_template: str | None = None
    """Jinja source used instead of the tokenizer's own chat template (``None``: the tokenizer's)."""

    def __init__(self, config: Any, tokenizer: Any) -> None:
        self.config = config
        self.tokenizer = tokenizer
        if tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer has no eos token: a renderer needs the token that ends a turn")
        self._eot = [int(tokenizer.eos_token_id)]

    # -- text <-> ids ----------------------------------------------------------------------

    def _template(self, messages: Sequence[Message], tools: Sequence[ToolSchema], generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            [dict(m) for m in messages], tools=[dict(t) for t in tools] or None,
            add_generation_prompt=generation_prompt, tokenize=False,
            **({"chat_template": self.chat_template} if self.chat_template is not None else {}),
        )

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def end_of_turn_ids(self) -> list[int]:
        return list(self._eot)

    def render(self, messages: Sequence[Message], tools: Sequence[ToolSchema]) -> list[int]:
        return self._encode(self._template(messages, tools, generation_prompt=True))

    def parse(self, token_ids: Sequence[int]) -> ParsedTurn:
        ids = list(token_ids)
        if ids[-len(self._eot):] == self._eot:
            ids = ids[: -len(self._eot)]
        return self.parse_text(self.tokenizer.decode(ids, skip_special_tokens=False))

    def parse_text(self, text: str) -> ParsedTurn:
        raise NotImplementedError

    def bridge(
        self, messages: Sequence[Message], new_messages: Sequence[Message], tools: Sequence[ToolSchema]
    ) -> list[int] | None:
        """Render the conversation before and after ``new_messages``; the bridge is what follows
        the end-of-turn token of the last assistant turn. It is kept only when the text before is
        a prefix of the text after *and* its ids are a prefix of the ids after (a template that
        rewrites history, or a tokenisation that merges across the boundary, says "cannot")."""
        before = self._template(messages, tools, generation_prompt=False)
        after = self._template([*messages, *new_messages], tools, generation_prompt=True)
        if not after.startswith(before):
            return None
        eot_text = self.tokenizer.decode(self._eot, skip_special_tokens=False)
        cut = before.rfind(eot_text)
        if cut < 0:
            return None
        head = self._encode(before[: cut + len(eot_text)])
        full = self._encode(after)
        if full[: len(head)] != head or head[-len(self._eot):] != self._eot:
            return None
        return full[len(head):]
