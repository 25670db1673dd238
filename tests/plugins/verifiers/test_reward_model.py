"""The ``reward_model`` verifier through its public paths (``grpo_run.score``, ``grpo-run check``,
``grpo-run``), against transformers run directly on the same checkpoint: what text it scores, one
forward per batch, the cut from the left, the transforms, mixing with other verifiers, the string
in ``reward_funcs``, the errors before training and the footprint a memory plan reads."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
import torch
from support.reward_models import random_reward_model
from transformers import AutoModelForSequenceClassification, AutoTokenizer

import grpo_run
from grpo_run.cli.main import main
from grpo_run.core.config import parse_config

PROMPT = [{"role": "user", "content": "12+7"}]
COMPLETIONS = ["19", "20", "1", "no idea at all"]


@pytest.fixture(scope="module")
def reward_model(tmp_path_factory, tiny_model_dir) -> Path:
    return random_reward_model(tmp_path_factory.mktemp("rm") / "rm", tiny_model_dir)


def reference_logits(model_dir: Path, texts: list[str], *, special: bool, max_length: int = 10**6) -> list[float]:
    """The one-label head's logit of each text, one text per forward (no padding), cut from the left."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    out = []
    with torch.no_grad():
        for text in texts:
            ids = tokenizer(text, add_special_tokens=special)["input_ids"][-max_length:]
            out.append(model(input_ids=torch.tensor([ids])).logits[0, 0].item())
    return out


def score(model_dir: Path, completions: list[str], prompt=PROMPT, **options) -> list[dict]:
    rows = [{"messages": prompt, "completion": c} for c in completions]
    return grpo_run.score(rows, verifiers={"reward_model": {"model": str(model_dir), **options}})


def raw(rows: list[dict]) -> list[float]:
    return [r["scores"]["reward_model"] for r in rows]


def test_it_scores_the_text_of_its_own_chat_template(reward_model) -> None:
    tokenizer = AutoTokenizer.from_pretrained(reward_model)
    texts = [tokenizer.apply_chat_template([*PROMPT, {"role": "assistant", "content": c}], tokenize=False)
             for c in COMPLETIONS]
    assert texts[0] == "<|user|>12+7<|assistant|>19<|eos|>"
    got = score(reward_model, COMPLETIONS)
    assert [r.get("error") for r in got] == [None] * 4
    assert raw(got) == pytest.approx(reference_logits(reward_model, texts, special=False), rel=1e-5, abs=1e-6)
    assert len(set(raw(got))) == 4  # the completions differ, so do their scores
    assert [r["reward"] for r in got] == raw(got)  # transform "none", weight 1: the logit is the reward


def test_it_scores_a_template_or_the_plain_prompt_and_completion(reward_model, tmp_path) -> None:
    template = "Q: {prompt}\nA: {completion}"
    got = score(reward_model, COMPLETIONS, template=template)
    texts = [template.format(prompt="12+7", completion=c) for c in COMPLETIONS]
    assert raw(got) == pytest.approx(reference_logits(reward_model, texts, special=True), rel=1e-5, abs=1e-6)
    plain = tmp_path / "plain"  # a reward model without a chat template: the prompt, then the completion
    shutil.copytree(reward_model, plain)
    (plain / "chat_template.jinja").unlink()
    got = score(plain, COMPLETIONS, prompt="12+7=")
    texts = [f"12+7={c}" for c in COMPLETIONS]
    assert raw(got) == pytest.approx(reference_logits(plain, texts, special=True), rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("batch_size", [64, 100, 512])
def test_512_completions_take_one_forward_per_batch(reward_model, batch_size) -> None:
    forwards = []

    def count(module, args, output):
        if type(module).__name__ == "LlamaForSequenceClassification":
            forwards.append(len(args[0]) if args else None)

    handle = torch.nn.modules.module.register_module_forward_hook(count)
    try:
        got = score(reward_model, [str(i) for i in range(512)], batch_size=batch_size)
    finally:
        handle.remove()
    assert len(forwards) == math.ceil(512 / batch_size)
    assert all(r.get("error") is None and math.isfinite(r["reward"]) for r in got)


def test_long_texts_lose_the_start_of_the_prompt(reward_model) -> None:
    prompt = [{"role": "user", "content": "1+2+3+4+5+6+7+8+9+10+11+12"}]
    tokenizer = AutoTokenizer.from_pretrained(reward_model)
    texts = [tokenizer.apply_chat_template([*prompt, {"role": "assistant", "content": c}], tokenize=False)
             for c in COMPLETIONS[:3]]
    got = score(reward_model, COMPLETIONS[:3], prompt=prompt, max_length=8)
    assert raw(got) == pytest.approx(reference_logits(reward_model, texts, special=False, max_length=8),
                                     rel=1e-5, abs=1e-6)
    whole = raw(score(reward_model, COMPLETIONS[:3], prompt=prompt))
    assert all(abs(a - b) > 1e-6 for a, b in zip(raw(got), whole, strict=True))  # it was cut


def test_the_transforms_and_the_clip(reward_model) -> None:
    logits = raw(score(reward_model, COMPLETIONS))
    sig = raw(score(reward_model, COMPLETIONS, transform="sigmoid"))
    assert sig == pytest.approx([1 / (1 + math.exp(-x)) for x in logits], rel=1e-12)
    mean = sum(logits) / 4
    std = math.sqrt(sum((x - mean) ** 2 for x in logits) / 4)  # population deviation, float64
    standard = raw(score(reward_model, COMPLETIONS, transform="standardize"))
    assert standard == pytest.approx([(x - mean) / (std + 1e-8) for x in logits], rel=1e-9)
    low, high = sorted(standard)[1], sorted(standard)[2]
    clipped = raw(score(reward_model, COMPLETIONS, transform="standardize", clip=[low, high]))
    assert clipped == pytest.approx([min(max(x, low), high) for x in standard], rel=1e-12)


def test_weights_rows_and_gates_mix_it_with_checkers(reward_model) -> None:
    logits = raw(score(reward_model, ["4", "5"], prompt="2+2="))
    rows = [{"prompt": "2+2=", "completion": c, "verifier": ["math", "reward_model"], "ground_truth": ["4", None]}
            for c in ("4", "5")]
    both = grpo_run.score(rows, verifiers={"math": {"weight": 2.0},
                                           "reward_model": {"model": str(reward_model), "weight": 0.5, "all_rows": False}})
    assert [r["reward"] for r in both] == pytest.approx([2.0 + 0.5 * logits[0], 0.5 * logits[1]], rel=1e-9)
    # As a gate: the math reward only where the reward model's logit is >= 0 (sigmoid >= 0.5, the top of [0, 0.5]).
    gate = {"model": str(reward_model), "mode": "gate", "transform": "sigmoid", "clip": [0.0, 0.5],
            "gate_fail_reward": -1.0}
    gated = grpo_run.score([{**r, "verifier": "math", "ground_truth": "4"} for r in rows],
                           verifiers={"math": {}, "reward_model": gate})
    assert [r["reward"] for r in gated] == [1.0 if logits[0] >= 0 else -1.0, 0.0 if logits[1] >= 0 else -1.0]


def test_a_string_in_reward_funcs_is_a_reward_model(reward_model) -> None:
    rows = [{"messages": PROMPT, "completion": c} for c in COMPLETIONS]
    as_string = grpo_run.score(rows, reward_funcs=[str(reward_model)])
    as_table = grpo_run.score(rows, verifiers={"reward_model": {"model": str(reward_model)}})
    assert raw(as_string) == raw(as_table)

    def short(completion, **kwargs):
        return 1.0 if len(completion) < 3 else 0.0

    mixed = grpo_run.score(rows, reward_funcs=[reward_model, short], reward_weights=[2.0, 1.0])
    assert [r["reward"] for r in mixed] == pytest.approx(
        [2 * x + (len(c) < 3) for x, c in zip(raw(as_table), COMPLETIONS, strict=True)], rel=1e-9)
    with pytest.raises(grpo_run.UserError, match="reward_funcs names 2 reward models .* a run takes one"):
        grpo_run.score(rows, reward_funcs=[str(reward_model), str(reward_model)])


def test_what_is_no_reward_model_is_refused_before_anything_loads(reward_model, tiny_model_dir, tmp_path, capsys) -> None:
    two = random_reward_model(tmp_path / "two", tiny_model_dir, num_labels=2)
    config = tmp_path / "run.toml"
    config.write_text('[task]\nname = "arithmetic"\n[verifiers.math]\n')
    cases = {
        str(tmp_path / "missing"): "'{}': no such directory",
        str(tiny_model_dir): "'{}': not a sequence classifier (architectures: LlamaForCausalLM)",
        str(two): "'{}': a classifier with 2 labels; a reward model has exactly one (num_labels = 1)",
    }
    for model, message in cases.items():
        assert main(["check", str(config), "--set", f"verifiers.reward_model.model={model}"]) == 2
        err = capsys.readouterr().err
        assert f"verifiers.reward_model.model: {message.format(model)}" in err and "Traceback" not in err


def test_a_device_that_does_not_exist_stops_the_run_before_its_first_step(reward_model, tiny_model_dir, tmp_path,
                                                                         capsys) -> None:
    from support.runs import write_run

    config = write_run(tmp_path, verifier="reward_model", verifier_config={"model": str(reward_model), "device": "cuda:1"},
                       model={"name_or_path": str(tiny_model_dir)}, scoring={"num_workers": 1})
    assert main([str(config), "--output-dir", str(tmp_path / "run")]) != 0
    err = capsys.readouterr().err
    assert "verifiers.reward_model.device = 'cuda:1': no such CUDA device (0 visible to the scoring worker)" in err
    assert "Traceback" not in err and not (tmp_path / "run" / "metrics.jsonl").exists()


def test_dtype_and_device_follow_the_run_unless_given(reward_model, plugin_host) -> None:
    def verifier(model: dict, **options):
        data = {"model": model, "task": {"name": "arithmetic"}, "train": {"local_eval_every": 0},
                "verifiers": {"reward_model": {"model": str(reward_model), **options}}}
        return parse_config(data, plugin_host.registry).verifiers["reward_model"]

    followed = verifier({"dtype": "bfloat16", "device": "cpu"})
    assert (followed.dtype, followed.device) == ("bfloat16", "cpu")
    own = verifier({"dtype": "bfloat16"}, dtype="float32", device="cuda:1")
    assert (own.dtype, own.device) == ("float32", "cuda:1")


def test_its_memory_is_planned_from_config_json_alone(reward_model) -> None:
    from grpo_run.plugins.verifiers.reward_model import RewardModelConfig, RewardModelVerifier

    assert isinstance(RewardModelVerifier, grpo_run.PlansMemory)
    config = RewardModelConfig(model=str(reward_model), dtype="bfloat16", device="cpu", batch_size=16, max_length=256)
    request = grpo_run.MemoryRequest(params=1, param_bytes=4, layers=1, kv_dim=1, vocab=1, sequences=1,
                                     prompt_tokens=1, response_tokens=1, device="cuda")
    weights, forward = RewardModelVerifier.memory_parts(config, request)
    loaded = AutoModelForSequenceClassification.from_pretrained(reward_model)
    assert weights.bytes == 2 * sum(p.numel() for p in loaded.parameters())  # bfloat16, head included
    assert weights.own_process and weights.device == "cpu" and not weights.transient
    assert forward.transient and forward.bytes == 16 * 256 * loaded.config.hidden_size * 8 * 2


def test_a_hub_id_out_of_reach_is_one_line(monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # no hub here: fail at once instead of retrying
    rows = [{"prompt": "2+2=", "completion": "4"}]
    with pytest.raises(grpo_run.RunError) as err:
        grpo_run.score(rows, verifiers={"reward_model": {"model": "nobody/no-such-reward-model"}})
    message = str(err.value)
    assert message.startswith("the verifiers could not be built: ValueError: verifiers.reward_model.model = "
                              "'nobody/no-such-reward-model': cannot load it: ")
    assert "\n" not in message
