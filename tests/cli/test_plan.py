"""``grpo-run plan``: the memory a run needs, before it runs, from a model directory holding only
``config.json``; checked against the learner step run on fake tensors (``--simulate``), and with
one-line errors for what a user gets wrong."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import LlamaConfig

from support.paths import EXAMPLES

from grpo_run.cli.main import main

GIB = 2**30


def _model(directory: Path, **shape) -> Path:
    """A model directory with only ``config.json``: no weights, no tokenizer."""
    defaults = dict(vocab_size=512, hidden_size=64, intermediate_size=256, num_hidden_layers=4,
                    num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    LlamaConfig(**{**defaults, **shape}).save_pretrained(directory)
    assert sorted(p.name for p in directory.iterdir()) == ["config.json"]
    return directory


def _config(tmp_path: Path, model: Path, extra: str = "") -> Path:
    path = tmp_path / "run.toml"
    path.write_text(f"""
[model]
name_or_path = "{model}"

[task]
name = "arithmetic"

[data]
max_prompt_token_length = 24

[rollout]
num_unique_prompts_rollout = 8
num_samples_per_prompt_rollout = 4
response_length = 40

[algorithm]
pack_length = 256

[verifiers.math]
weight = 1.0
{extra}
""")
    return path


def _plan(capsys, *args: str) -> tuple[int, dict]:
    code = main(["plan", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_a_model_directory_with_only_its_config_is_planned_part_by_part(tmp_path: Path, capsys) -> None:
    model = _model(tmp_path / "model")
    code, plan = _plan(capsys, str(_config(tmp_path, model)), "--device", "cuda", "--memory", "80GiB")
    assert code == 0 and plan["fits"]
    params = plan["model"]["params"]
    trainer = plan["processes"][0]
    assert trainer["device"] == "cuda:0"
    resident = {part["name"]: part["bytes"] for part in trainer["resident"]}
    assert resident["weights"] == 4 * params and resident["optimizer state"] == 8 * params  # float32, AdamW
    assert resident["hf engine: weights"] == 4 * params  # the hf engine's copy, in the same process
    assert set(trainer["phases"]) == {"training micro-batch", "optimizer step", "generation", "weight sync"}
    step = {part["name"]: part["bytes"] for part in trainer["phases"]["optimizer step"]}
    assert step["gradients"] == 4 * params and step["step temporaries"] == 4 * params  # multi-tensor AdamW on CUDA
    budget = plan["budget"]
    assert budget["source"] == "auto" and budget["max_tokens_per_forward"] == 8 * 4 * (24 + 40)  # the whole mini-batch fits
    assert plan["devices"]["cuda:0"]["usable_bytes"] == pytest.approx(0.9 * 80 * GIB)


CASES = {
    "cpu defaults": ("cpu", ""),
    "cuda defaults": ("cuda", ""),
    "small budget, checkpointing, reference and two mini-batches": (
        "cuda", 'algorithm.num_mini_batches = 2\n[learner]\nmax_tokens_per_forward = 512\n'
                '[kl]\nbeta = 0.05\nreference = "frozen"\n'),
    "bfloat16 weights": ("cpu", '[learner]\nmax_tokens_per_forward = 700\n'),
}


@pytest.mark.parametrize("case", CASES)
def test_the_plan_is_within_15_percent_of_the_simulated_learner_step(tmp_path: Path, capsys, case: str) -> None:
    device, extra = CASES[case]
    if extra.startswith("algorithm."):  # a key of a table the config already has
        first, _, extra = extra.partition("\n")
    else:
        first = ""
    model = _model(tmp_path / "model", hidden_size=96, intermediate_size=320, vocab_size=4096)
    sets = ["--set", first.replace(" ", "")] if first else []
    if case == "bfloat16 weights":
        sets += ["--set", 'model.dtype="bfloat16"']
    code, plan = _plan(capsys, str(_config(tmp_path, model, extra)), "--device", device, "--memory", "24GiB",
                       "--simulate", *sets)
    assert code == 0
    simulated = plan["simulated"]
    assert simulated["micro_batches"] >= 1
    assert abs(simulated["difference"]) <= 0.15, simulated


def test_a_run_that_cannot_fit_exits_1_with_one_line_saying_what_to_change(tmp_path: Path) -> None:
    model = _model(tmp_path / "model", hidden_size=512, intermediate_size=2048, num_hidden_layers=8, vocab_size=32000)
    config = _config(tmp_path, model, "[learner]\nmax_tokens_per_forward = 0\n")
    done = subprocess.run([sys.executable, "-m", "grpo_run", "plan", str(config), "--device", "cuda", "--memory", "1GiB",
                           "--set", "rollout.num_unique_prompts_rollout=64"], capture_output=True, text=True)
    assert done.returncode == 1, done.stderr
    lines = done.stdout.strip().splitlines()
    verdict = next(i for i, line in enumerate(lines) if line.startswith("does not fit: needs "))
    suggested = [line.strip().removeprefix("--set ") for line in lines[verdict + 2:]]
    assert lines[verdict + 1] == "what fits, as overrides:" and suggested, lines[verdict:]
    assert "Traceback" not in done.stderr
    again = subprocess.run([sys.executable, "-m", "grpo_run", "plan", str(config), "--device", "cuda", "--memory", "1GiB",
                            "--set", "rollout.num_unique_prompts_rollout=64",
                            *[a for s in suggested for a in ("--set", s)]], capture_output=True, text=True)
    assert again.returncode == 0, again.stdout[-2000:]
    assert again.stdout.strip().splitlines()[-1] == "fits"


@pytest.mark.parametrize(("args", "message"), [
    (["--memory", "lots"], "error: --memory 'lots': expected a size such as 24GiB, 80GB or 512MiB"),
    (["--memory", "0GiB"], "error: --memory '0GiB': expected a size such as 24GiB, 80GB or 512MiB"),
    (["--device", "tpu"], "error: --device 'tpu': expected cuda or cpu"),
])
def test_bad_memory_and_device_values_get_one_line_errors(args: list[str], message: str) -> None:
    done = subprocess.run([sys.executable, "-m", "grpo_run", "plan", str(EXAMPLES / "arithmetic.toml"), *args],
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip() == message


def test_a_registered_model_is_planned_too(capsys) -> None:
    code, plan = _plan(capsys, str(EXAMPLES / "arithmetic.toml"), "--device", "cpu", "--memory", "8GiB")
    assert code == 0 and plan["fits"] and plan["model"]["layers"] == 4


@pytest.mark.parametrize(("sync", "part"), [("adapter", "the adapter"), ("merged", "merged LoRA weights")])
def test_a_lora_run_plans_what_its_weight_sync_builds(capsys, sync: str, part: str) -> None:
    """Adapter sync builds the adapter for the engines (and the engine holds it beside its base);
    merged sync builds a whole merged copy of the weights each time."""
    code, plan = _plan(capsys, str(EXAMPLES / "arithmetic.toml"), "--device", "cpu", "--memory", "8GiB",
                       "--set", "model.lora.r=8", "--set", f'model.lora.sync="{sync}"')
    trainer = plan["processes"][0]
    built = {p["name"]: p["bytes"] for p in trainer["phases"]["weight sync"]}
    weights = next(p["bytes"] for p in trainer["resident"] if p["name"] == "weights")
    assert code == 0 and list(built) == [part]
    if sync == "adapter":  # r = 8 on every linear layer of the embedded model: 9% of its weights
        assert built[part] < 0.15 * weights
    else:
        assert built[part] == weights
    engine_parts = [p["name"] for p in trainer["resident"]]
    assert ("hf engine: LoRA adapter" in engine_parts) == (sync == "adapter")


def test_a_sweep_is_planned_with_every_variants_adapter_and_the_engines_whole_batch(tmp_path: Path, capsys) -> None:
    model = _model(tmp_path / "model")
    config = str(_config(tmp_path, model, "[model.lora]\nr = 8\n"))
    _, alone = _plan(capsys, config, "--device", "cpu", "--memory", "24GiB")
    code, sweep = _plan(capsys, config, "--device", "cpu", "--memory", "24GiB",
                        "--vary", "optim.lr=1e-3,3e-3", "--vary", "run.seed=1,2,3")
    assert code == 0 and sweep["variants"] == 6 and alone["variants"] == 1

    def resident(plan):
        return {part["name"]: part["bytes"] for part in plan["processes"][0]["resident"]}

    def phase(plan, name):
        return {part["name"]: part["bytes"] for part in plan["processes"][0]["phases"][name]}

    assert resident(sweep)["weights"] == resident(alone)["weights"]  # one base model
    assert resident(sweep)["LoRA adapters"] == 6 * resident(alone)["LoRA adapters"]
    assert resident(sweep)["optimizer state"] == 6 * resident(alone)["optimizer state"]
    assert phase(sweep, "optimizer step")["gradients"] == phase(alone, "optimizer step")["gradients"]
    assert resident(sweep)["hf engine: LoRA adapter"] == 6 * resident(alone)["hf engine: LoRA adapter"]
    # The engine generates the six variants' 8 x 4 sequences together (the hf engine's KV buffers: 6x).
    assert phase(sweep, "generation")["hf engine: KV cache"] == 6 * phase(alone, "generation")["hf engine: KV cache"]
    assert main(["plan", config, "--vary", "model.dtype=float32,bfloat16"]) == 2
