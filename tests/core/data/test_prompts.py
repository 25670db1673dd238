"""Prompt encoding: ``prompt`` rows through the chat template or as plain text, and the error for a
model without a template."""

from __future__ import annotations

import pytest

from grpo_run.core.data.prompts import PromptEncoder, PromptRow, tokenise_prompt_set
from grpo_run.core.data.rows import DataError
from grpo_run.plugins.models.char_tokenizer import build_char_tokenizer


@pytest.fixture()
def tokenizer():
    return build_char_tokenizer(model_max_length=64)


def text_of(tokenizer, ids):
    return tokenizer.decode(ids, skip_special_tokens=False)


def test_a_prompt_row_goes_through_the_chat_template(tokenizer):
    encoder = PromptEncoder(tokenizer, 64)
    assert text_of(tokenizer, encoder.encode({"id": "a", "prompt": "1+2"})) == "<|user|>1+2<|assistant|>"
    with_system = {"id": "b", "prompt": "1+2", "system_prompt": "S"}
    assert text_of(tokenizer, encoder.encode(with_system)) == "<|user|>S<|user|>1+2<|assistant|>"
    chat = {"id": "c", "messages": [{"role": "user", "content": "1+2"}]}
    assert encoder.encode(chat) == encoder.encode({"id": "a", "prompt": "1+2"})


def test_without_the_template_a_prompt_is_plain_text_and_a_chat_is_an_error(tokenizer):
    encoder = PromptEncoder(tokenizer, 64, apply_chat_template=False)
    assert text_of(tokenizer, encoder.encode({"id": "a", "prompt": "1+2"})) == "1+2"
    with pytest.raises(DataError) as e:
        encoder.encode({"id": "c", "messages": [{"role": "user", "content": "1+2"}]})
    assert str(e.value) == ("row 'c' is a chat ('messages'), and data.apply_chat_template = false; "
                            "a chat needs the template (set it to true)")


def test_a_model_without_a_chat_template_names_the_option(tokenizer):
    tokenizer.chat_template = None
    with pytest.raises(DataError) as e:
        PromptEncoder(tokenizer, 64).encode({"id": "a", "prompt": "1+2"})
    assert str(e.value) == ("the model's tokenizer has no chat template, and row 'a' needs one "
                            "(data.apply_chat_template = true); set data.apply_chat_template = false to feed "
                            "'prompt' columns as plain text")


def test_too_long_prompts_are_dropped_and_an_eval_set_that_empties_warns(tokenizer):
    encoder = PromptEncoder(tokenizer, 8, apply_chat_template=False)
    train = [{"id": "s", "prompt": "1+2"}, {"id": "l", "prompt": "123456789"}]
    prompts = tokenise_prompt_set(train, [{"id": "e", "prompt": "123456789"}], encoder, ["earlier note"])
    assert [r["id"] for r in prompts.train] == ["s"] and isinstance(prompts.train[0], PromptRow)
    assert prompts.dropped == 2 and prompts.eval == []
    assert prompts.warnings == ["earlier note", "every eval prompt is longer than data.max_prompt_token_length=8 "
                                                "tokens, so evaluation is off"]
