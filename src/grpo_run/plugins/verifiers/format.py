"""The ``format`` verifier: does the completion follow the R1 reasoning format?

DeepSeek-R1 (https://arxiv.org/abs/2501.12948) rewards completions shaped as::

    <think> reasoning </think> <answer> final answer </answer>

Score 1.0 when, after stripping surrounding whitespace, the completion is exactly a reasoning
block followed (after optional whitespace) by an answer block, each tag appearing once, the answer
not blank; 0.0 otherwise. Reasoning may be empty, text outside the blocks is not allowed. The tag
names are configurable; ``think_tag = ""`` expects only the answer block, and
``think_opened_in_prompt`` handles chat templates whose prompt already ends with ``<think>``.

It scores every row by default (``all_rows``) and is additive or a gate (``mode``): as a gate
the row's whole reward becomes ``gate_fail_reward`` when the format is wrong. The scorer applies
both; see :class:`grpo_run.ShapingVerifierConfig`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

import attrs

from grpo_run import ShapingVerifierConfig

_TAG_NAME = re.compile(r"[A-Za-z_][\w.:-]*")


def _tag_name(allow_empty: bool) -> Any:
    def check(_inst: Any, _attribute: attrs.Attribute, value: str) -> None:
        if not (isinstance(value, str) and ((allow_empty and value == "") or _TAG_NAME.fullmatch(value))):
            extra = ' (or "" for none)' if allow_empty else ""
            raise ValueError(f"must be a tag name such as 'think'{extra}, got {value!r}")

    return check


@attrs.frozen
class FormatVerifierConfig(ShapingVerifierConfig):
    """Options of the ``format`` verifier (plus ``weight``, ``mode``, ``gate_fail_reward``, ``all_rows``)."""

    think_tag: str = attrs.field(default="think", validator=_tag_name(allow_empty=True))
    """Name of the reasoning block's tag; ``""`` when no reasoning block is expected."""
    answer_tag: str = attrs.field(default="answer", validator=_tag_name(allow_empty=False))
    """Name of the answer block's tag."""
    think_opened_in_prompt: bool = False
    """The prompt already ends with the opening reasoning tag (some chat templates add it), so the
    completion starts inside the reasoning block and must not open it again."""


class FormatVerifier:
    """1.0 when the completion is ``<think>...</think> <answer>...</answer>`` (configurable tags), else 0.0."""

    name: ClassVar[str] = "format"
    Config: ClassVar[type] = FormatVerifierConfig

    def __init__(self, config: FormatVerifierConfig | None = None) -> None:
        self.config = config if config is not None else FormatVerifierConfig()
        think, answer = self.config.think_tag, self.config.answer_tag
        body = rf"<{re.escape(answer)}>(?P<answer>.*?)</{re.escape(answer)}>"
        self._tags = {f"<{answer}>": 1, f"</{answer}>": 1}
        if think:
            opening = "" if self.config.think_opened_in_prompt else f"<{re.escape(think)}>"
            body = rf"{opening}.*?</{re.escape(think)}>\s*{body}"
            self._tags.update({f"<{think}>": 0 if self.config.think_opened_in_prompt else 1, f"</{think}>": 1})
        self._pattern = re.compile(rf"\s*{body}\s*", re.DOTALL)

    def score(self, completion: str, ground_truth: Any, row: Mapping[str, Any]) -> float:
        """1.0 for a well-formed completion, else 0.0 (``ground_truth`` is not used)."""
        match = self._pattern.fullmatch(completion)
        if match is None or not match["answer"].strip():
            return 0.0
        if any(completion.count(tag) != count for tag, count in self._tags.items()):
            return 0.0
        return 1.0
