"""The ``[data]`` section: where prompt rows come from (``[[data.train]]`` / ``[[data.eval]]``
sources, see docs/data.md) and how they become prompts."""

from __future__ import annotations

from pathlib import PurePath
from typing import Any, Literal

import attrs
from attrs import validators as v

from grpo_run.core.config.slots import PluginSlot
from grpo_run.core.config.validators import positive


@attrs.frozen
class TransformSlot(PluginSlot):
    """A row transform chosen by a data source: ``transform = "gsm8k"`` or
    ``transform = {name = "boxed", ...options}``; ``config`` is the transform's own ``Config``."""


def _positive_or_none(_inst: Any, attribute: attrs.Attribute, value: float | None) -> None:
    if value is not None and not value > 0:
        raise ValueError(f"must be > 0, got {value}")


@attrs.frozen
class DataSource:
    """One source of prompt rows (an entry of ``data.train`` or ``data.eval``): where the rows
    are, how many to take, and which of their columns hold the prompt, the ground truth and the
    verifier. See docs/data.md."""

    path: str | None = None
    """A local file (``.jsonl``, ``.json``, ``.parquet``, ``.csv``) or a directory written by
    ``datasets``' ``save_to_disk``."""
    hf_dataset: str | None = None
    """A Hugging Face hub dataset id (``"openai/gsm8k"``); needs the hub or its local cache."""
    subset: str | None = None
    """The hub dataset's configuration name (``"main"``)."""
    split: str | None = None
    """Split of ``hf_dataset`` (default ``"train"``) or of a saved ``DatasetDict`` directory."""
    format: Literal["auto", "jsonl", "json", "parquet", "csv"] = "auto"
    """File format of ``path``; ``"auto"`` goes by the file's extension."""
    name: str | None = None
    """The rows' ``dataset`` value (what the ``mixture`` sampler weighs); default: the file's
    stem, the directory's name or the hub id."""
    weight: float | None = attrs.field(default=None, validator=_positive_or_none)
    """How much of the source to use: ``round(weight x rows)`` rows, a seeded sample below 1, every
    row repeated (then a sample of the rest) above 1. Default 1: every row once."""
    rows: int | None = attrs.field(default=None, validator=v.optional(positive))
    """Use exactly this many rows (a seeded sample, or repeats when the source has fewer)."""
    prompt_key: str | None = None
    """Column holding the prompt as plain text (default: ``prompt``, unless the row has ``messages``)."""
    messages_key: str | None = None
    """Column holding the prompt as a chat, a list of ``{role, content}`` (default: ``messages``)."""
    ground_truth_key: str = "ground_truth"
    """Column holding the ground truth the verifier compares against."""
    verifier: str | None = None
    """Verifier for rows without a ``verifier_key`` column (typically the whole source)."""
    verifier_key: str = "verifier"
    """Column naming each row's verifier (a name or a list of names)."""
    id_key: str = "id"
    """Column holding a row id; rows without one get ``<name>-<index>``."""
    system_prompt: str | None = None
    """A system message put before every prompt (a chat that starts with one keeps its own)."""
    transform: TransformSlot | None = None
    """A row transform (plugin family ``transform``), applied after the columns are mapped:
    ``"gsm8k"`` (``... #### 72`` -> ``72``), ``"boxed"`` (a MATH solution -> its last ``\\boxed{}``)."""

    def __attrs_post_init__(self) -> None:
        if (self.path is None) == (self.hf_dataset is None):
            raise ValueError("a data source needs exactly one of 'path' and 'hf_dataset'")
        if self.weight is not None and self.rows is not None:
            raise ValueError("give a data source 'weight' or 'rows', not both")
        if self.prompt_key is not None and self.messages_key is not None:
            raise ValueError("give a data source 'prompt_key' or 'messages_key', not both")
        if self.subset is not None and self.hf_dataset is None:
            raise ValueError("'subset' names a configuration of 'hf_dataset'; it needs one")
        if self.format != "auto" and self.path is None:
            raise ValueError("'format' is the file format of 'path'; it needs one")

    @property
    def label(self) -> str:
        """The rows' ``dataset`` value."""
        if self.name is not None:
            return self.name
        if self.hf_dataset is not None:
            return self.hf_dataset
        assert self.path is not None
        p = PurePath(self.path)
        return p.stem if p.suffix else p.name


@attrs.frozen
class DataSection:
    train: tuple[DataSource, ...] = ()
    """Training sources (``[[data.train]]`` tables), mixed into one set of rows in this order."""
    eval: tuple[DataSource, ...] = ()
    """Evaluation sources (``[[data.eval]]``), the same way; not with a ``[task]``, which has its own."""
    seed: int = 1
    """Seed of the sampling that ``weight`` / ``rows`` do."""
    apply_chat_template: bool = True
    """Feed ``prompt`` columns through the tokenizer's chat template (as one user message, after
    the ``system_prompt`` if any). False: the prompt text is tokenised as it is, and ``messages``
    rows are an error. A model without a chat template needs false."""
    max_prompt_token_length: int = attrs.field(default=256, validator=positive)
    """Prompts longer than this (in tokens, after the chat template) are dropped with a warning."""
