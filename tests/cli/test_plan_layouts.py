"""``grpo-run plan`` at the sizes users bring: Qwen2.5-7B and Llama-3.1-8B shapes with Open
Instruct's settings on 8 x 80 GB (the plan says what fits, and its suggested overrides make it
fit, never repeating what is in force), 6 learners + 2 vLLM engines planned without vLLM, one
computation behind the budget and the verdict, a context too short, and shapes no model has."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from transformers import LlamaConfig, Qwen2Config

GIB = 2**30

QWEN_7B = Qwen2Config(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                      num_attention_heads=28, num_key_value_heads=4, tie_word_embeddings=False,
                      max_position_embeddings=32768)
LLAMA_8B = LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=False,
                       max_position_embeddings=131072)
OPEN_INSTRUCT = """
[model]
name_or_path = "{model}"
device = "cuda"
autocast = "bfloat16"

[task]
name = "arithmetic"

[data]
max_prompt_token_length = 512

[rollout]
num_unique_prompts_rollout = 32
num_samples_per_prompt_rollout = 8
response_length = 1024

[algorithm]
pack_length = 16384

[kl]
name = "k3"
beta = 0.01

[learner]
num_learners = 8
strategy = "{strategy}"
{stage}

[verifiers.math]
weight = 1.0
"""


def _write(tmp_path: Path, shape, strategy: str = "fsdp2", extra: str = "") -> Path:
    model = tmp_path / "model"
    shape.save_pretrained(model)
    path = tmp_path / "run.toml"
    stage = "zero_stage = 3" if strategy == "deepspeed" else ""
    path.write_text(OPEN_INSTRUCT.format(model=model, strategy=strategy, stage=stage) + extra)
    return path


def _plan(config: Path, *args: str) -> tuple[int, dict, str]:
    done = subprocess.run([sys.executable, "-m", "grpo_run", "plan", str(config), "--device", "cuda", "--memory", "80GiB",
                           "--gpus", "8", "--json", *args], capture_output=True, text=True, timeout=600)
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return done.returncode, (json.loads(done.stdout) if done.stdout.strip() else {}), done.stderr


@pytest.mark.parametrize(("shape", "strategy"), [(QWEN_7B, "fsdp2"), (LLAMA_8B, "fsdp2"), (QWEN_7B, "deepspeed")],
                         ids=["qwen-7b-fsdp2", "llama-8b-fsdp2", "qwen-7b-zero3"])
def test_open_instructs_7b_settings_get_a_layout_that_fits(tmp_path: Path, shape, strategy: str) -> None:
    config = _write(tmp_path, shape, strategy)
    code, plan, _ = _plan(config)
    assert code == 1 and not plan["fits"]
    ranks = [p for p in plan["processes"] if re.fullmatch(r"learner rank \d+", p["name"])]
    assert len(ranks) == 8
    reference = next(part for part in ranks[0]["resident"] if part["name"] == "reference policy")
    assert reference["bytes"] == pytest.approx(plan["model"]["params"] * 2 / 8)  # sharded, in bfloat16
    suggested = plan["suggested"]
    assert suggested and "cuda:0" in plan["advice"]
    in_force = {'learner.strategy="fsdp2"', "learner.num_learners=8", "model.gradient_checkpointing=true"}
    assert not in_force & set(suggested)
    code, fixed, _ = _plan(config, *[a for s in suggested for a in ("--set", s)])
    assert code == 0 and fixed["fits"], fixed["advice"]
    assert all(d["peak_bytes"] <= d["usable_bytes"] for d in fixed["devices"].values() if d["usable_bytes"] is not None)
    assert fixed["devices"].get("cpu", {"usable_bytes": None})["usable_bytes"] is None  # another machine's host: not judged


def test_identical_ranks_are_printed_once(tmp_path: Path) -> None:
    config = _write(tmp_path, QWEN_7B)
    done = subprocess.run([sys.executable, "-m", "grpo_run", "plan", str(config), "--device", "cuda", "--memory", "80GiB",
                           "--set", "engine.max_batch_size=64"], capture_output=True, text=True, timeout=600)
    out = done.stdout
    assert done.returncode == 0 and out.strip().endswith("fits"), out[-3000:]
    assert not re.search(r"learner rank \d", out)
    assert "learner ranks 0 to 7 on cuda:0 to cuda:7, each" in " ".join(out.split())
    assert "cuda:1 to cuda:7 (each)" in out


def test_six_learners_and_two_vllm_engines_are_planned_without_vllm(tmp_path: Path) -> None:
    extra = """
[engine]
name = "vllm"
num_engines = 2
gpu_memory_utilization = 0.9
python = "/nonexistent/python"

[distributed]
backend = "ray"
engine_resources = { num_gpus = 1 }
learner_resources = { num_gpus = 1 }
"""
    config = _write(tmp_path, QWEN_7B, extra=extra)
    code, plan, _ = _plan(config, "--set", "learner.num_learners=6", "--set", "rollout.async_steps=2",
                          "--set", 'model.dtype="bfloat16"', "--set", 'model.autocast="none"')
    assert code == 0 and plan["fits"], plan.get("advice")
    engines = {p["device"]: p for p in plan["processes"] if p["name"].startswith("vllm engine")}
    assert sorted(engines) == ["cuda:6", "cuda:7"]
    share = engines["cuda:6"]["resident"][0]
    assert share["bytes"] == pytest.approx(0.9 * 80 * GIB) and "sequences of 1,536 at once" in share["note"]
    assert any("engine.python" in note and "set aside" in note for note in plan["notes"])
    assert plan["gpus"] == {"used": 8, "available": 8}


def test_a_vllm_engine_whose_weights_leave_no_kv_cache_does_not_fit(tmp_path: Path) -> None:
    extra = '\n[engine]\nname = "vllm"\ngpu_memory_utilization = 0.2\npython = "/nonexistent/python"\n'
    config = _write(tmp_path, QWEN_7B, extra=extra)
    code, plan, _ = _plan(config, "--set", "learner.num_learners=1", "--set", 'learner.strategy="single"',
                          "--set", 'engine.cuda_visible_devices="1"')
    assert code == 1 and any("vllm engine" in p and "KV cache" in p for p in plan["problems"]), plan["problems"]


def test_the_budget_is_the_largest_for_which_the_whole_plan_fits(tmp_path: Path) -> None:
    """A CPU run whose generation sits beside the learner (``async_steps = 2``): the automatic
    budget leaves room for it, and one step more would not fit."""
    config = _write(tmp_path, LlamaConfig(vocab_size=32000, hidden_size=256, intermediate_size=1024,
                                          num_hidden_layers=8, num_attention_heads=4, max_position_embeddings=4096))
    common = ["--set", 'model.device="cpu"', "--set", "learner.num_learners=1", "--set", 'learner.strategy="single"',
              "--set", "rollout.async_steps=2", "--set", "rollout.response_length=512", "--set", "kl.beta=0.0"]
    done = subprocess.run([sys.executable, "-m", "grpo_run", "plan", str(config), "--device", "cpu", "--memory", "10GiB",
                           "--json", *common], capture_output=True, text=True, timeout=600)
    plan = json.loads(done.stdout)
    budget = plan["budget"]
    assert done.returncode == 0 and plan["fits"], (plan["advice"], plan["devices"])
    assert budget["source"] == "auto" and budget["max_tokens_per_forward"] == budget["largest_that_fits"]
    whole = 32 * 8 * (512 + 512)
    assert 1024 <= budget["max_tokens_per_forward"] < whole  # it had to split
    trainer = plan["processes"][0]
    assert "hf engine: KV cache" in json.dumps(trainer["resident"])  # generation beside the learner
    more = budget["max_tokens_per_forward"] + 64
    done = subprocess.run([sys.executable, "-m", "grpo_run", "plan", str(config), "--device", "cpu", "--memory", "10GiB",
                           "--json", *common, "--set", f"learner.max_tokens_per_forward={more}"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 1 and not json.loads(done.stdout)["fits"]


def test_a_sequence_longer_than_the_models_context_is_a_config_error(tmp_path: Path) -> None:
    shape = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, max_position_embeddings=128)
    config = _write(tmp_path, shape)
    for command in (["plan", str(config), "--device", "cuda", "--memory", "80GiB"],
                    ["check", str(config), "--set", 'model.device="cpu"']):
        done = subprocess.run([sys.executable, "-m", "grpo_run", *command], capture_output=True, text=True, timeout=300)
        assert done.returncode == 2, done.stdout + done.stderr
        assert "rollout.response_length: data.max_prompt_token_length + rollout.response_length = 512 + 1024 = 1536 " \
               "tokens, more than the model's context (128 positions" in done.stderr, done.stderr


@pytest.mark.parametrize(("field", "value", "message"), [
    ("hidden_size", 10**9, "hidden_size = 1,000,000,000: more than any model has"),
    ("hidden_size", -128, "hidden_size = -128: must be at least 1"),
    ("hidden_size", "wide", "hidden_size = 'wide': expected a whole number"),
    ("num_hidden_layers", 10**7, "num_hidden_layers = 10,000,000: more than any model has"),
    ("vocab_size", 0, "vocab_size = 0: must be at least 1"),
])
def test_a_shape_no_model_has_is_refused_in_one_line(tmp_path: Path, field: str, value, message: str) -> None:
    model = tmp_path / "model"
    LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4).save_pretrained(model)
    raw = json.loads((model / "config.json").read_text())
    raw[field] = value
    (model / "config.json").write_text(json.dumps(raw))
    config = tmp_path / "run.toml"
    config.write_text(OPEN_INSTRUCT.format(model=model, strategy="fsdp2", stage=""))
    cpu = ["--set", 'model.device="cpu"']
    for command in (["plan", str(config), "--device", "cuda", "--memory", "80GiB"], ["plan", str(config), "--simulate", *cpu],
                    ["check", str(config), *cpu]):
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "grpo_run", *command], capture_output=True, text=True, timeout=300)
        assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0] and "config.json" in lines[0], done.stderr
        assert time.monotonic() - started < 120


def test_ctrl_c_ends_a_long_simulation(tmp_path: Path) -> None:
    config = _write(tmp_path, QWEN_7B)
    # Started as a shell without job control starts `cmd &`: with SIGINT ignored, which Ctrl-C's
    # kill -INT must still stop.
    proc = subprocess.Popen([sys.executable, "-m", "grpo_run", "plan", str(config), "--device", "cuda", "--memory",
                             "80GiB", "--simulate"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    time.sleep(20)  # planned by now, simulating
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert proc.returncode == 130 and "Traceback" not in err, err[-2000:]
