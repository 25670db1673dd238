"""``grpo-run check``'s look at the data: every source read, mapped, transformed and checked as
training would, the sampler built on the rows, and each prompt measured with the model's tokenizer --
everything knowable without loading the model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.text import Text

from grpo_run.core.config.schema import RunConfig
from grpo_run.core.data.prompts import PromptEncoder
from grpo_run.core.data.rows import DataError
from grpo_run.core.data.sources import LoadedRows, load_rows
from grpo_run.core.errors import UserError
from grpo_run.core.plugins.families import SAMPLER
from grpo_run.core.plugins.host import PluginHost
from grpo_run.core.plugins.registry import ComponentRegistry

SHOWN_OVERSIZED = 5
"""Oversized prompts named one by one; the rest are counted."""


def check_data(cfg: RunConfig, registry: ComponentRegistry) -> LoadedRows:
    """Load every row (raising :class:`DataError` naming the file and line of the first bad one)
    and build the sampler on the training rows (a mixture naming a source with no rows fails here)."""
    rows = load_rows(cfg, registry)
    try:
        registry.get(SAMPLER, cfg.sampler.name)(cfg.sampler.config, rows.train, cfg.run.seed)
    except (ValueError, TypeError, KeyError) as exc:
        raise DataError(f"sampler {cfg.sampler.name!r} cannot use the training rows: {exc}") from None
    return rows


def oversized_prompts(cfg: RunConfig, host: PluginHost, rows: LoadedRows) -> list[str]:
    """One line per prompt longer than ``data.max_prompt_token_length`` tokens (training leaves
    them out), naming its file and line; the model's tokenizer is loaded for it, not the model."""
    limit = cfg.data.max_prompt_token_length
    candidates = [row for row in [*rows.train, *rows.eval] if _utf8_size(row) + TEMPLATE_ALLOWANCE > limit]
    if not candidates:  # every prompt fits whatever the tokenizer: load none (check stays quick)
        return []
    from grpo_run.core.loop.build import load_tokenizer, resolve_model_path

    try:
        tokenizer = load_tokenizer(cfg, resolve_model_path(cfg, host))
    except UserError as exc:  # a hub model that is not cached, say: loading will tell
        return [f"prompt lengths not checked: {exc}"]
    encoder = PromptEncoder(tokenizer, limit, cfg.data.apply_chat_template)
    seen: set[int] = set()
    too_long = []
    for row in candidates:
        if id(row) not in seen:
            seen.add(id(row))
            if encoder.fitting(row) is None:
                too_long.append(rows.where(row))
    notes = [f"{where}: the prompt is longer than data.max_prompt_token_length = {limit} tokens; "
             "training leaves it out" for where in too_long[:SHOWN_OVERSIZED]]
    if len(too_long) > SHOWN_OVERSIZED:
        notes.append(f"{len(too_long) - SHOWN_OVERSIZED} more prompts are longer than "
                     f"data.max_prompt_token_length = {limit} tokens")
    return notes


TEMPLATE_ALLOWANCE = 0
"""Tokens allowed for what a chat template adds around a prompt before a row counts as possibly
oversized.

Byte-level BPE, SentencePiece with byte fallback and character vocabularies all give at most one
token per UTF-8 byte, so only prompts of more than ``limit - TEMPLATE_ALLOWANCE`` bytes are
tokenised, and the tokenizer (with transformers) is loaded only when there are any: ``check``
stays quick. A prompt pushed over the limit by the template's own tokens alone is not flagged
here; the run leaves it out and counts it (docs/data.md)."""


def _utf8_size(row: Mapping[str, Any]) -> int:
    if "messages" in row:
        return sum(len(str(m.get("content", "")).encode()) for m in row["messages"])
    return len(str(row.get("prompt", "")).encode())


def print_data_summary(console: Console, rows: LoadedRows, notes: Sequence[str] = ()) -> None:
    """One line per source (rows read, left out by its transform, used), then the warnings
    (the data's own, then ``notes``)."""
    for s in rows.sources:
        dropped = f", {s.dropped} left out by its transform" if s.dropped else ""
        console.print(Text(f"  {s.key} {s.label}: {s.read} rows read{dropped}, {s.used} used"), soft_wrap=True)
    for note in [*rows.warnings, *notes]:
        console.print(Text.assemble(("warning:", "yellow"), " ", note), soft_wrap=True)
