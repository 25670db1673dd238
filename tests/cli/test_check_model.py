"""``grpo-run check`` (and training, before anything loads) catch model settings that only fail
once weights load: a device this torch lacks, a model directory that is not there."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from support.runs import write_run
from support.verifiers import LENGTH_REWARD

from grpo_run.cli.main import main


@pytest.fixture
def cfg(tmp_path: Path, tiny_model_dir: Path) -> Path:
    return write_run(tmp_path, verifier=LENGTH_REWARD, model={"name_or_path": str(tiny_model_dir)})


@pytest.mark.parametrize("command", ["check", "train"])
def test_cuda_on_a_cpu_only_torch_is_a_one_line_error(cfg, tmp_path, capsys, monkeypatch, command) -> None:
    monkeypatch.setattr(torch.version, "cuda", None)  # a CPU build, whichever build runs the tests
    monkeypatch.setattr(torch.version, "hip", None)
    assert main([command, str(cfg), "--set", "model.device=cuda"]) == 2
    out = capsys.readouterr()
    assert out.err.splitlines() == [
        f"error: {cfg}: model.device: 'cuda', but this torch ({torch.__version__}) is built without CUDA; "
        f'use model.device = "cpu", or install a CUDA build of torch'
    ]
    assert not (tmp_path / "runs").exists()  # nothing was started


def test_cuda_on_a_cuda_build_without_a_gpu_is_a_one_line_error(cfg, tmp_path, capsys, monkeypatch) -> None:
    """PyPI's default torch is a CUDA build (what `make test-oldest` installs), often on a machine
    with no GPU."""
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["train", str(cfg), "--set", "model.device=cuda"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: {cfg}: model.device: 'cuda', but no CUDA device is visible to this process (check CUDA_VISIBLE_DEVICES)"
    ]
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("/no/such/model", "'/no/such/model': no such directory (registered models: smollm2-135m-instruct, "
                           "tiny-arithmetic, tiny-random)"),
        ("./models/tiny-arithmetc", "'./models/tiny-arithmetc': no such directory (registered models: "
                                    "smollm2-135m-instruct, tiny-arithmetic, tiny-random) (did you mean 'tiny-arithmetic'?)"),
        ("tiny-arithmetc", "'tiny-arithmetc' is not a registered model, nor a directory (did you mean 'tiny-arithmetic'?)"),
    ],
)
def test_a_missing_model_directory_is_caught_by_check(cfg, capsys, name, message) -> None:
    assert main(["check", str(cfg), "--set", f"model.name_or_path={name}"]) == 2
    assert capsys.readouterr().err.splitlines() == [f"error: {cfg}: model.name_or_path: {message}"]


def test_a_directory_without_a_model_and_hub_ids_and_registered_names(cfg, tmp_path, capsys) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["check", str(cfg), "--set", f"model.name_or_path={empty}"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: {cfg}: model.name_or_path: '{empty}' has no config.json; expected a model directory "
        f"(Hugging Face format, as written by save_pretrained)"
    ]
    for fine in ("Qwen/Qwen3-0.6B", "gpt2", "tiny-arithmetic"):  # hub ids are left to loading
        assert main(["check", str(cfg), "--set", f"model.name_or_path={fine}"]) == 0


def test_a_misspelt_model_comes_with_the_other_errors_at_once(cfg, capsys) -> None:
    # Config errors, then the model name: one run of `check` lists them all.
    assert main(["check", str(cfg), "--set", "model.name_or_path=tiny-arithmetc", "--set", "train.total_stpes=3",
                 "--set", "rollout.temperature=hot"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and err[0].startswith(f"error: {cfg}: ") and all(e.startswith(f"{cfg}: ") for e in err[1:])
    text = "\n".join(err)
    assert "train.total_stpes: unknown key (did you mean 'total_steps'?)" in text
    assert "rollout.temperature" in text
    assert ("model.name_or_path: 'tiny-arithmetc' is not a registered model, nor a directory "
            "(did you mean 'tiny-arithmetic'?)") in text


def test_a_misspelt_model_comes_with_the_datas_error(cfg, tmp_path, capsys) -> None:
    assert main(["check", str(cfg), "--set", "model.name_or_path=tiny-arithmetc",
                 "--set", f"data.train=[{{path = \"{tmp_path / 'missing.jsonl'}\"}}]"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (f"error: {cfg}: model.name_or_path: 'tiny-arithmetc' is not a registered model, nor a "
                      "directory (did you mean 'tiny-arithmetic'?)")
    assert len(err) == 2 and err[1].startswith(f"{cfg}: data: ") and "missing.jsonl" in err[1]


def test_a_wrongly_typed_model_name_is_reported_once(cfg, capsys) -> None:
    assert main(["check", str(cfg), "--set", "model.name_or_path=3"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "model.name_or_path" in err[0]
