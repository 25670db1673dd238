"""A Llama 3.1-like test tokenizer: one token per printable character plus the header,
end-of-turn and ``<|python_tag|>`` special tokens, and a template that renders tool answers as
``ipython`` turns (as Llama 3.1's does)."""

from __future__ import annotations

import string
from typing import Any

SPECIALS = ["<|pad|>", "<|eot_id|>", "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
            "<|python_tag|>", "<|unk|>"]

LLAMA_TOOLS = (
    "<|begin_of_text|>"
    "{% if tools %}<|start_header_id|>system<|end_header_id|>\n\nTools:{% for t in tools %} {{ t.function.name }}"
    "{% endfor %}<|eot_id|>{% endif %}"
    "{% for m in messages %}"
    "{% set role = 'ipython' if m.role == 'tool' else m.role %}"
    "<|start_header_id|>{{ role }}<|end_header_id|>\n\n{{ m.content }}<|eot_id|>"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)


def llama_tokenizer() -> Any:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIALS + list(string.printable))}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<|unk|>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens(SPECIALS)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<|pad|>", eos_token="<|eot_id|>", unk_token="<|unk|>",
        bos_token="<|begin_of_text|>", additional_special_tokens=SPECIALS[3:6], chat_template=LLAMA_TOOLS)
