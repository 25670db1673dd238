"""A policy with NaN or inf weights is never made a checkpoint: the write is refused with one
line, nothing is left on disk, ``latest`` keeps naming the previous checkpoint (also when the
poisoned one would have replaced it)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from grpo_run.core.errors import RunError
from grpo_run.core.loop.checkpoint import NonFiniteWeightsError, nonfinite_tensors, save_checkpoint, verify_checkpoint


@pytest.fixture(scope="module")
def model_and_tokenizer(tiny_model_dir: Path):
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir), AutoTokenizer.from_pretrained(tiny_model_dir)


def _poisoned(model: torch.nn.Module, value: float) -> torch.nn.Module:
    bad = copy.deepcopy(model)
    name, param = next(iter(bad.named_parameters()))
    with torch.no_grad():
        param.view(-1)[:3] = value
    return bad


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_poisoned_policy_is_never_written_and_latest_stays(tmp_path, model_and_tokenizer, value) -> None:
    model, tokenizer = model_and_tokenizer
    save_checkpoint(tmp_path / "step_2", model, tokenizer, trainer_state={"step": 2})
    before = (tmp_path / "step_2" / "model.safetensors").read_bytes()
    bad = _poisoned(model, value)
    first = next(iter(bad.state_dict()))
    for step in (4, 2):  # a new checkpoint, and one that would replace step_2
        with pytest.raises(NonFiniteWeightsError) as err:
            save_checkpoint(tmp_path / f"step_{step}", bad, tokenizer, trainer_state={"step": step})
        assert isinstance(err.value, RunError)  # "run stopped: ...", exit 1
        assert str(err.value) == (
            f"checkpoint {tmp_path / f'step_{step}'} not written: the policy's weights are not finite (NaN or inf "
            f"in 1 tensor, first model.safetensors:{first}: 3 values); step_2 is still the latest checkpoint; "
            f"a policy that is not finite only generates garbage, so the run stops"
        )
        assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step_2"]  # no step_4, no temporary
        assert (tmp_path / "latest").read_text() == "step_2\n"
    assert (tmp_path / "step_2" / "model.safetensors").read_bytes() == before
    assert verify_checkpoint(tmp_path / "step_2") is None


def test_the_first_checkpoint_of_a_run_says_none_exists(tmp_path, model_and_tokenizer) -> None:
    model, tokenizer = model_and_tokenizer
    with pytest.raises(NonFiniteWeightsError, match="; no earlier checkpoint exists;"):
        save_checkpoint(tmp_path / "step_1", _poisoned(model, float("-inf")), tokenizer, trainer_state={"step": 1})
    assert list(tmp_path.iterdir()) == []


def test_nonfinite_tensors_counts_each_tensor(tmp_path, model_and_tokenizer) -> None:
    model, _ = model_and_tokenizer
    model.save_pretrained(tmp_path / "ok")
    assert nonfinite_tensors(tmp_path / "ok") == {}
    _poisoned(model, float("nan")).save_pretrained(tmp_path / "bad")
    found = nonfinite_tensors(tmp_path / "bad")
    assert list(found.values()) == [3]
