"""``learner.max_tokens_per_forward = "auto"`` bounds a real run's peak: with the memory a run may
plan for (``learner.max_memory_gib``) smaller than a whole mini-batch needs, the learner splits
every mini-batch into micro-batches and its process peaks near the plan, far below the same run
without a bound. Each run is ``grpo-run`` in a process of its own (its high-water resident set).

The model is deep and narrow (h64, 8 layers) and the prompts long and unshared
(``algorithm.share_prompts = false``), so that the learner's activations, not the weights, the
libraries or generation, decide the peak.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import LlamaConfig, LlamaForCausalLM

from support.runs import write_run

from grpo_run.core.plugins.host import build_plugin_host

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    source = build_plugin_host().registry.get("model", "tiny-arithmetic")
    tiny = Path(source(source.Config()).resolve())
    out = tmp_path_factory.mktemp("deep-narrow")
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(tiny / name, out / name)
    vocab = json.loads((tiny / "config.json").read_text())["vocab_size"]
    config = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=256, num_hidden_layers=8,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256)
    LlamaForCausalLM(config).save_pretrained(out)
    return out


def _run(tmp_path: Path, model: Path, name: str, learner: dict) -> dict:
    (tmp_path / name).mkdir()
    config = write_run(
        tmp_path / name, verifier="math", train_rows=64, model={"name_or_path": str(model)},
        prompt=lambda i: "12+30=42, 7+5=12, 40+9=49, 3+3=6, 18+2=20, 9+9=18, 25+25=50, 1+8=9, " + f"{i}+1=",
        data={"max_prompt_token_length": 96},
        rollout={"num_unique_prompts_rollout": 32, "num_samples_per_prompt_rollout": 8, "response_length": 12},
        algorithm={"pack_length": 256, "share_prompts": False}, learner=learner, train={"total_steps": 1},
    )
    out = tmp_path / name / "run"
    done = subprocess.run([sys.executable, "-m", "grpo_run", str(config), "--output-dir", str(out)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    (step,) = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if '"perf/micro_batches"' in line]
    return {"out": done.stdout + done.stderr, **step}


def test_an_automatic_budget_bounds_the_peak_of_a_real_run(tmp_path: Path, model: Path) -> None:
    bounded = _run(tmp_path, model, "auto", {"max_memory_gib": 1.2})
    assert "token budget" in bounded["out"] and "learner.max_memory_gib" in bounded["out"]
    assert bounded["perf/micro_batches"] >= 2
    assert bounded["perf/peak_memory_gib"] <= 1.25 * 1.2  # the limit, within the plan's stated accuracy
    assert bounded["perf/planned_memory_gib"] == pytest.approx(bounded["perf/peak_memory_gib"], rel=0.25)
    whole = _run(tmp_path, model, "whole", {"max_tokens_per_forward": 0})
    assert whole["perf/micro_batches"] == 1
    assert whole["perf/peak_memory_gib"] >= bounded["perf/peak_memory_gib"] + 0.3, (whole, bounded)
