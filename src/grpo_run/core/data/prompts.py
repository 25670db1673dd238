"""Prompt rows with their token ids, computed once when the data loads.

:class:`PromptRow` is what samplers receive and return: a read-only mapping of the row's fields
(exactly what verifiers and samplers read) that also carries the prompt's token ids as an
attribute, so neither a draw nor an eval re-tokenises it, and the ids never reach a verifier.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs

from grpo_run.core.data.rows import DataError


class PromptRow(Mapping[str, Any]):
    """A checked prompt row: its fields (a read-only mapping) and ``token_ids``, the tokenised
    prompt (chat template applied for ``messages`` rows)."""

    __slots__ = ("_fields", "token_ids")

    def __init__(self, fields: Mapping[str, Any], token_ids: Sequence[int]) -> None:
        self._fields = dict(fields)
        self.token_ids: tuple[int, ...] = tuple(token_ids)

    def __getitem__(self, key: str) -> Any:
        return self._fields[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __repr__(self) -> str:
        return f"PromptRow({self._fields!r}, {len(self.token_ids)} tokens)"

    def __reduce__(self) -> tuple[Any, ...]:
        return (PromptRow, (self._fields, self.token_ids))


@attrs.frozen
class PromptSet:
    """Train and eval rows of a run, tokenised."""

    train: list[PromptRow]
    eval: list[PromptRow]
    dropped: int = 0
    """Rows left out because their prompt is longer than ``data.max_prompt_token_length``."""
    warnings: list[str] = attrs.Factory(list)
    """What the console should say about the data (an empty eval source, evaluation off)."""


MAX_CHARS_PER_TOKEN = 32
"""Far above any real prompt's average (English ~4 characters a token, code ~3): a prompt of more
than ``max_prompt_tokens x MAX_CHARS_PER_TOKEN`` characters is judged on that much of its text."""


class PromptEncoder:
    """Turns rows into prompt token ids: through the tokenizer's chat template (``messages`` rows,
    and ``prompt`` rows as one user message when ``apply_chat_template``), or as plain text.

    The work per row is bounded by ``max_prompt_tokens``: the tokenizer never sees more than
    ``max_prompt_tokens x MAX_CHARS_PER_TOKEN`` characters of a prompt that will be left out (a
    10 MB row tokenised in full took 4 GB), see :meth:`fitting`.
    """

    def __init__(self, tokenizer: Any, max_prompt_tokens: int, apply_chat_template: bool = True) -> None:
        self.tokenizer = tokenizer
        self.max_prompt_tokens = max_prompt_tokens
        self.apply_chat_template = apply_chat_template

    def encode(self, row: Mapping[str, Any]) -> list[int]:
        """Token ids of the row's prompt (its own when it is a :class:`PromptRow`)."""
        if isinstance(row, PromptRow):
            return list(row.token_ids)
        return self._ids(self._text(row))

    def fitting(self, row: Mapping[str, Any]) -> list[int] | None:
        """The row's prompt ids when they fit ``max_prompt_tokens``, else None, tokenising at most
        ``max_prompt_tokens x MAX_CHARS_PER_TOKEN`` characters of a longer prompt: when that much
        of it is already over the limit, so is the whole. (A prompt averaging more characters a
        token than that is tokenised in full: the answer stays exact.)"""
        text = self._text(row)
        bound = self.max_prompt_tokens * MAX_CHARS_PER_TOKEN
        if len(text) > bound and len(self._ids(text[:bound])) > self.max_prompt_tokens:
            return None
        ids = self._ids(text)
        return ids if len(ids) <= self.max_prompt_tokens else None

    def _text(self, row: Mapping[str, Any]) -> str:
        """The prompt as the tokenizer reads it: the rendered chat, or the plain text."""
        messages = self.chat_of(row)
        if messages is None:
            return row["prompt"]
        self._check_template(row)
        return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)

    def _ids(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def chat_of(self, row: Mapping[str, Any]) -> list[Mapping[str, Any]] | None:
        """The chat the template renders for ``row``, or None for a plain-text prompt."""
        if "messages" in row:
            if not self.apply_chat_template:
                raise DataError(f"row {row.get('id')!r} is a chat ('messages'), and data.apply_chat_template = "
                                "false; a chat needs the template (set it to true)")
            return list(row["messages"])
        if not self.apply_chat_template:
            return None
        system = row.get("system_prompt")
        user = {"role": "user", "content": row["prompt"]}
        return [{"role": "system", "content": system}, user] if system is not None else [user]

    def _check_template(self, row: Mapping[str, Any]) -> None:
        if getattr(self.tokenizer, "chat_template", None) is None:
            option = "" if "messages" in row else ("; set data.apply_chat_template = false to feed "
                                                   "'prompt' columns as plain text")
            raise DataError(f"the model's tokenizer has no chat template, and row {row.get('id')!r} needs one "
                            f"(data.apply_chat_template = true){option}")

    def tokenise(self, rows: Sequence[Mapping[str, Any]]) -> tuple[list[PromptRow], int]:
        """Every row that fits ``max_prompt_tokens`` as a :class:`PromptRow`, and how many did not fit."""
        kept = []
        for row in rows:
            ids = self.fitting(row)
            if ids is not None:
                kept.append(PromptRow(row, ids))
        return kept, len(rows) - len(kept)


def tokenise_prompt_set(
    train: Sequence[Mapping[str, Any]], evals: Sequence[Mapping[str, Any]], encoder: PromptEncoder,
    warnings: Sequence[str] = (),
) -> PromptSet:
    """Tokenise checked rows once; rows whose prompt is too long are dropped and counted."""
    kept_train, dropped_train = encoder.tokenise(train)
    kept_eval, dropped_eval = encoder.tokenise(evals)
    if not kept_train:
        raise DataError(
            f"every training prompt is longer than data.max_prompt_token_length={encoder.max_prompt_tokens} tokens"
        )
    notes = list(warnings)
    if evals and not kept_eval:
        notes.append(f"every eval prompt is longer than data.max_prompt_token_length={encoder.max_prompt_tokens} "
                     "tokens, so evaluation is off")
    return PromptSet(train=kept_train, eval=kept_eval, dropped=dropped_train + dropped_eval, warnings=notes)
