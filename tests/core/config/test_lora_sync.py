"""``model.lora.sync`` through ``grpo-run check``: the adapter where the engine serves it, merged
weights with the reason where it cannot, and a one-line config error when an explicit choice or
an engine limit cannot be honoured (no vLLM needed: its interpreter is only checked to exist)."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

from grpo_run.cli.main import main
from grpo_run.core.config.toml_writer import dumps_toml
from support.paths import EXAMPLES


def check(tmp_path: Path, capsys, engine: str, engine_options: dict | None = None, **lora) -> tuple[int, str, str]:
    """``grpo-run check`` on the embedded example with ``[model.lora]`` = ``lora`` and ``engine``:
    (exit code, stdout, stderr joined on one line)."""
    data = tomllib.loads((EXAMPLES / "arithmetic.toml").read_text())
    data["model"]["lora"] = lora
    data["engine"] = {"name": engine, **({"python": sys.executable} if engine == "vllm" else {}), **(engine_options or {})}
    path = tmp_path / "lora.toml"
    path.write_text(dumps_toml(data))
    code = main(["check", str(path)])
    out, err = capsys.readouterr()
    return code, out, " ".join(err.split())


@pytest.mark.parametrize("engine", ["hf", "vllm"])
def test_unset_sync_is_the_adapter_where_the_engine_serves_it(tmp_path, capsys, engine):
    code, out, _ = check(tmp_path, capsys, engine, r=8)
    assert code == 0
    assert "LoRA weight sync: adapter\n" in out


def test_dora_or_modules_to_save_on_vllm_fall_back_to_merged_weights_saying_why(tmp_path, capsys):
    code, out, _ = check(tmp_path, capsys, "vllm", r=8, use_dora=True)
    assert code == 0
    assert "LoRA weight sync: use_dora: vLLM cannot serve DoRA adapters; syncing merged weights (model.lora.sync)" in out
    code, out, _ = check(tmp_path, capsys, "vllm", r=8, modules_to_save=["lm_head"])
    assert code == 0
    assert ("LoRA weight sync: modules_to_save: vLLM cannot serve adapters with fully trained modules; "
            "syncing merged weights") in out
    code, out, _ = check(tmp_path, capsys, "hf", r=8, use_dora=True)  # peft serves DoRA
    assert code == 0 and "LoRA weight sync: adapter\n" in out


def test_a_rank_above_what_vllm_can_hold_falls_back_unless_the_engine_limit_was_set(tmp_path, capsys):
    code, out, _ = check(tmp_path, capsys, "vllm", r=1024)
    assert code == 0
    assert "r: 1024 is above vLLM's largest LoRA rank, 512; syncing merged weights" in out
    code, _, err = check(tmp_path, capsys, "vllm", r=16, engine_options={"max_lora_rank": 8})
    assert code == 2
    assert ("lora.toml: engine.max_lora_rank: is 8, below model.lora.r = 16: vLLM cannot load the adapter "
            '(raise it, or sync merged weights: model.lora.sync = "merged")') in err
    assert "Traceback" not in err
    code, out, _ = check(tmp_path, capsys, "vllm", r=16, sync="merged", engine_options={"max_lora_rank": 8})
    assert code == 0 and "LoRA weight sync: merged\n" in out


def test_an_explicit_adapter_sync_the_engine_refuses_is_one_config_error(tmp_path, capsys):
    code, out, err = check(tmp_path, capsys, "vllm", r=8, use_dora=True, sync="adapter")
    assert code == 2 and out == ""
    assert err.startswith('error: ') and err.count("error:") == 1
    assert ('lora.toml: model.lora.sync: is "adapter", but the vllm engine cannot serve this adapter: '
            'use_dora: vLLM cannot serve DoRA adapters (set sync = "merged", or leave it unset)') in err
    code, _, err = check(tmp_path, capsys, "vllm", r=16, sync="adapter", engine_options={"max_lora_rank": 8})
    assert code == 2
    assert "model.lora.sync: is \"adapter\", but the vllm engine cannot serve this adapter: r: 16 is above " \
           "engine.max_lora_rank = 8" in err
    assert "engine.max_lora_rank: is 8" not in err  # one error for one mistake


def test_an_engine_without_the_ability_syncs_merged_weights(tmp_path, capsys, monkeypatch):
    from grpo_run.plugins.engines.hf import HFEngine

    monkeypatch.delattr(HFEngine, "update_adapter")
    code, out, _ = check(tmp_path, capsys, "hf", r=8)
    assert code == 0
    assert "LoRA weight sync: the hf engine cannot take adapters (it has no update_adapter); syncing merged" in out
    code, _, err = check(tmp_path, capsys, "hf", r=8, sync="adapter")
    assert code == 2 and "the hf engine cannot take adapters" in err
