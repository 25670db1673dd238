"""Checkpoint files: the manifest catches damage, resuming falls back to the newest complete
checkpoint, old ones are pruned, permissions follow the umask, a full disk is one line."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from grpo_run.core.errors import UserError
from grpo_run.core.loop.checkpoint import (
    CheckpointWriteError,
    find_checkpoint,
    prune_checkpoints,
    save_checkpoint,
    verify_checkpoint,
)


@pytest.fixture(scope="module")
def model_and_tokenizer(tiny_model_dir: Path):
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir), AutoTokenizer.from_pretrained(tiny_model_dir)


def _save(directory: Path, step: int, model_and_tokenizer) -> Path:
    model, tokenizer = model_and_tokenizer
    return save_checkpoint(directory / f"step_{step}", model, tokenizer, trainer_state={"step": step})


def test_a_checkpoint_has_a_manifest_that_catches_truncation_and_edits(tmp_path, model_and_tokenizer) -> None:
    ckpt = _save(tmp_path, 2, model_and_tokenizer)
    manifest = json.loads((ckpt / "manifest.json").read_text())["files"]
    weights = ckpt / "model.safetensors"
    assert manifest["model.safetensors"]["size"] == weights.stat().st_size and "trainer_state.pt" in manifest
    assert verify_checkpoint(ckpt) is None
    size = weights.stat().st_size
    with weights.open("r+b") as fh:
        fh.truncate(size - 100)
    assert verify_checkpoint(ckpt) == f"model.safetensors has {size - 100} bytes, the manifest says {size}"
    with weights.open("ab") as fh:
        fh.write(b"\0" * 100)  # same size, other bytes
    assert verify_checkpoint(ckpt) == "model.safetensors does not match its SHA-256 in the manifest"


def test_resuming_skips_damaged_checkpoints_and_says_so(tmp_path, model_and_tokenizer) -> None:
    for step in (2, 4, 6):
        _save(tmp_path, step, model_and_tokenizer)
    for step in (4, 6):
        (tmp_path / f"step_{step}" / "model.safetensors").write_bytes(b"cut")
    notes: list[str] = []
    assert find_checkpoint(tmp_path, on_damaged=notes.append) == tmp_path / "step_2"
    assert notes == [
        f"checkpoint {tmp_path / 'step_6'} is damaged (model.safetensors has 3 bytes, the manifest says "
        f"{(tmp_path / 'step_2' / 'model.safetensors').stat().st_size}); resuming from {tmp_path / 'step_2'} instead",
        f"checkpoint {tmp_path / 'step_4'} is damaged (model.safetensors has 3 bytes, the manifest says "
        f"{(tmp_path / 'step_2' / 'model.safetensors').stat().st_size}); resuming from {tmp_path / 'step_2'} instead",
    ]
    # Asked for a damaged one by name: an error that points at the complete one.
    with pytest.raises(UserError, match=r"the checkpoint is damaged: model\.safetensors has 3 bytes, .* \(the newest "
                                        r"complete one next to it is .*step_2\)$"):
        find_checkpoint(tmp_path / "step_6")


def test_keep_last_n_prunes_older_checkpoints_but_never_latest(tmp_path, model_and_tokenizer) -> None:
    for step in (1, 2, 3, 4):
        _save(tmp_path, step, model_and_tokenizer)
    assert prune_checkpoints(tmp_path, 2) == ["step_1", "step_2"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step_3", "step_4"]
    (tmp_path / "latest").write_text("step_3\n")
    assert prune_checkpoints(tmp_path, 1) == []  # step_3 is what latest names
    assert prune_checkpoints(tmp_path, 0) == []


def test_checkpoint_directories_get_the_umask_permissions_not_0700(tmp_path, model_and_tokenizer) -> None:
    old = os.umask(0o027)
    try:
        ckpt = _save(tmp_path, 1, model_and_tokenizer)
    finally:
        os.umask(old)
    assert ckpt.stat().st_mode & 0o777 == 0o750  # the group (a vLLM server account) can read it
    assert {p.name: p.stat().st_mode & 0o777 for p in ckpt.iterdir()}["model.safetensors"] == 0o640
    assert {p.stat().st_mode & 0o777 for p in ckpt.iterdir()} == {0o640}


def test_a_full_disk_is_one_line_and_the_previous_checkpoint_stays_latest(tmp_path, model_and_tokenizer, monkeypatch) -> None:
    _save(tmp_path, 2, model_and_tokenizer)

    def disk_full(obj, path, *args, **kwargs):
        raise RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 4416 vs 4310") from OSError(
            errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(torch, "save", disk_full)
    with pytest.raises(CheckpointWriteError) as caught:
        _save(tmp_path, 4, model_and_tokenizer)
    message = str(caught.value)
    assert message.startswith(f"cannot write checkpoint {tmp_path / 'step_4'}: no space left on device (")
    assert message.endswith("of this checkpoint written); step_2 is still the latest checkpoint")
    assert "\n" not in message
    assert (tmp_path / "latest").read_text() == "step_2\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step_2"]  # no temporary left
