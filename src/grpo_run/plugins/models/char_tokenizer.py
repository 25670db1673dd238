"""A character-level tokenizer built locally, wrapped as a Hugging Face fast tokenizer.

Every character is one token; a handful of special tokens mark the chat roles, the end of a
turn and padding. Nothing is downloaded: the vocabulary is fixed in this module, so the token
ids are stable across versions (append new characters at the end only).

Chat format (the ``chat_template`` saved with the tokenizer)::

    <|user|>12+7<|assistant|>19<|eos|>

A user turn is ``<|user|>`` + content; an assistant turn is ``<|assistant|>`` + content +
``<|eos|>``; ``add_generation_prompt=True`` appends ``<|assistant|>``. A system turn, if
given, is ``<|user|>`` + content too (the tiny models have no system role of their own).
"""

from __future__ import annotations

import string
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported when a tokenizer is built: `grpo-run check` loads this module without them
    from transformers import PreTrainedTokenizerFast

PAD_TOKEN = "<|pad|>"
EOS_TOKEN = "<|eos|>"
USER_TOKEN = "<|user|>"
ASSISTANT_TOKEN = "<|assistant|>"
UNK_TOKEN = "<|unk|>"

SPECIAL_TOKENS: tuple[str, ...] = (PAD_TOKEN, EOS_TOKEN, USER_TOKEN, ASSISTANT_TOKEN, UNK_TOKEN)
"""Special tokens, ids 0..4 in this order (pad = 0, eos = 1)."""

CHARACTERS: tuple[str, ...] = tuple(
    string.digits + "+-*=()" + " " + string.ascii_lowercase + string.ascii_uppercase + ".,:?!'\"/" + "\n"
)
"""Ordinary characters, ids 5.. in this order."""

CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "<|assistant|>{{ message['content'] }}<|eos|>"
    "{%- else -%}"
    "<|user|>{{ message['content'] }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|assistant|>{%- endif -%}"
)
"""Jinja chat template: ``<|user|>{q}<|assistant|>{a}<|eos|>``, no whitespace added."""


def char_vocab() -> dict[str, int]:
    """The full vocabulary: special tokens first, then the characters."""
    return {tok: i for i, tok in enumerate(SPECIAL_TOKENS + CHARACTERS)}


def build_char_tokenizer(model_max_length: int = 128) -> PreTrainedTokenizerFast:
    """Build the character tokenizer (left padding, chat template, pad/eos/unk set).

    :param model_max_length: recorded in the tokenizer config; match the model's context size.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel(vocab=char_vocab(), unk_token=UNK_TOKEN))
    # One pre-token per character (newline included); WordLevel maps each to its id.
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    # Fuse joins tokens without the spaces WordLevel's default decoding would insert.
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens(list(SPECIAL_TOKENS))
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD_TOKEN,
        eos_token=EOS_TOKEN,
        unk_token=UNK_TOKEN,
        additional_special_tokens=[USER_TOKEN, ASSISTANT_TOKEN],
        padding_side="left",
        chat_template=CHAT_TEMPLATE,
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )
