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


class PromptEncoder:
    """Turns rows into prompt token ids with the tokenizer's chat template."""

    def __init__(self, tokenizer: Any, max_prompt_tokens: int) -> None:
        self.tokenizer = tokenizer
        self.max_prompt_tokens = max_prompt_tokens

    def encode(self, row: Mapping[str, Any]) -> list[int]:
        """Token ids of the row's prompt (its own when it is a :class:`PromptRow`)."""
        if isinstance(row, PromptRow):
            return list(row.token_ids)
        if "messages" in row:
            text = self.tokenizer.apply_chat_template(list(row["messages"]), add_generation_prompt=True, tokenize=False)
        else:
            text = row["prompt"]
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def tokenise(self, rows: Sequence[Mapping[str, Any]]) -> tuple[list[PromptRow], int]:
        """Every row that fits ``max_prompt_tokens`` as a :class:`PromptRow`, and how many did not fit."""
        kept = []
        for row in rows:
            ids = self.encode(row)
            if len(ids) <= self.max_prompt_tokens:
                kept.append(PromptRow(row, ids))
        return kept, len(rows) - len(kept)


def tokenise_prompt_set(train: Sequence[Mapping[str, Any]], evals: Sequence[Mapping[str, Any]], encoder: PromptEncoder) -> PromptSet:
    """Tokenise checked rows once; rows whose prompt is too long are dropped and counted."""
    kept_train, dropped_train = encoder.tokenise(train)
    kept_eval, dropped_eval = encoder.tokenise(evals)
    if not kept_train:
        raise DataError(
            f"every training prompt is longer than data.max_prompt_token_length={encoder.max_prompt_tokens} tokens"
        )
    return PromptSet(train=kept_train, eval=kept_eval, dropped=dropped_train + dropped_eval)
