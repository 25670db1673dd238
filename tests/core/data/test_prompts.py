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


class _Recording:
    """A tokenizer that records the longest text it was asked to tokenise."""

    def __init__(self, inner, chars_per_token: int = 1) -> None:
        self.inner, self.chars_per_token, self.longest = inner, chars_per_token, 0
        self.chat_template = inner.chat_template

    def apply_chat_template(self, *args, **kwargs):
        return self.inner.apply_chat_template(*args, **kwargs)

    def __call__(self, text, add_special_tokens=False):
        self.longest = max(self.longest, len(text))
        if self.chars_per_token == 1:
            return self.inner(text, add_special_tokens=add_special_tokens)
        return {"input_ids": list(range(-(-len(text) // self.chars_per_token)))}


def test_a_huge_prompt_is_judged_on_a_bounded_part_of_its_text(tokenizer):
    from grpo_run.core.data.prompts import MAX_CHARS_PER_TOKEN

    recording = _Recording(tokenizer)
    encoder = PromptEncoder(recording, 16)
    huge = {"id": "huge", "prompt": "7" * 10_000_000}
    prompts = tokenise_prompt_set([{"id": "s", "prompt": "1+2"}, huge], [], encoder)
    assert [r["id"] for r in prompts.train] == ["s"] and prompts.dropped == 1
    assert recording.longest == 16 * MAX_CHARS_PER_TOKEN  # not 10 MB
    # a prompt just over the limit is still measured exactly
    assert len(encoder.fitting({"id": "a", "prompt": "1" * 14})) == 16  # <|user|>, 14 digits, <|assistant|>
    assert encoder.fitting({"id": "b", "prompt": "1" * 15}) is None


def test_a_tokenizer_with_very_long_tokens_still_gets_the_exact_answer(tokenizer):
    from grpo_run.core.data.prompts import MAX_CHARS_PER_TOKEN

    long_tokens = _Recording(tokenizer, chars_per_token=4 * MAX_CHARS_PER_TOKEN)
    encoder = PromptEncoder(long_tokens, 16, apply_chat_template=False)
    fits = "x" * (15 * 4 * MAX_CHARS_PER_TOKEN)  # 15 tokens, though longer than the character bound
    assert len(encoder.fitting({"id": "a", "prompt": fits})) == 15
    assert encoder.fitting({"id": "b", "prompt": fits * 2}) is None


def test_training_with_a_10_mb_prompt_row_drops_it_without_the_memory_of_tokenising_it(tmp_path):
    import json
    import subprocess
    import sys

    from support.processes import subprocess_env
    from support.runs import write_run

    cfg = write_run(tmp_path, verifier="exact-match", train_rows=8, train={"total_steps": 1, "local_eval_every": 0})
    train = tmp_path / "train.jsonl"
    rows = [json.loads(line) for line in train.read_text().splitlines()]
    rows[1]["messages"][0]["content"] = "7" * 10_000_000
    train.write_text("".join(json.dumps(r) + "\n" for r in rows))
    probe = ("import sys; from grpo_run.cli.main import main; from grpo_run.core.memory.budget import resident_peak_bytes; "
             "code = main(sys.argv[1:]); print('PEAK_KB', int(resident_peak_bytes() / 1024)); sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", probe, str(cfg), "--output-dir", str(tmp_path / "run")],
                          capture_output=True, text=True, env=subprocess_env(), timeout=300)
    assert done.returncode == 0, done.stderr
    assert "1 prompts are longer than data.max_prompt_token_length=16 tokens and were left out" in done.stdout + done.stderr
    peak_gb = int(done.stdout.split("PEAK_KB")[1].split()[0]) / 1024**2
    assert peak_gb < 1.5, peak_gb  # 0.41 GB; tokenising the row in full took 4.0-4.4 GB
