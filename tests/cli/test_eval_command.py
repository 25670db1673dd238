"""``grpo-run eval CONFIG --checkpoint DIR``: a saved checkpoint scores exactly what the training
run's own evaluation after that step scored (greedy decoding is deterministic), pass@k from the
config's ``[eval]``, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file

from support.observed import OVERRIDES, observed_run
from support.paths import EXAMPLES
from support.runs import write_run
from support.verifiers import DIGIT_SHARE

from grpo_run.cli.main import main
from grpo_run.core.loop.evaluation import pass_at_k


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return observed_run(tmp_path_factory)


def _sets() -> list[str]:
    return [arg for item in OVERRIDES for arg in ("--set", item)]


def test_a_checkpoint_scores_what_training_measured_after_its_step(run: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "eval"
    assert main(["eval", str(EXAMPLES / "arithmetic.toml"), "--checkpoint", str(run / "checkpoints" / "step_2"),
                 "--output-dir", str(out), "--json", *_sets()]) == 0
    printed = json.loads(capsys.readouterr().out)
    trained = {json.loads(line)["step"]: json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()}
    assert printed["step"] == 2 and printed["checkpoint"] == str(run / "checkpoints" / "step_2")
    assert printed["eval/accuracy"] == trained[2]["eval/accuracy"]
    assert printed["eval/response_length_mean"] == trained[2]["eval/response_length_mean"]
    assert sorted(k for k in printed if k.startswith("eval/pass@")) == [f"eval/pass@{k}" for k in range(1, 5)]
    assert json.loads((out / "eval_metrics.json").read_text()) == printed
    traces = [json.loads(line) for line in (out / "rollouts" / "eval_2.jsonl").read_text().splitlines()]
    greedy = [t for t in traces if t["greedy"]]
    assert sum(t["solved"] for t in greedy) / len(greedy) == pytest.approx(printed["eval/accuracy"], abs=1e-12)
    correct: dict[int, int] = {}
    for t in traces:
        if not t["greedy"]:
            correct[t["group"]] = correct.get(t["group"], 0) + t["solved"]
    assert printed["eval/pass@2"] == pytest.approx(sum(pass_at_k(4, c, 2) for c in correct.values()) / len(correct), abs=1e-12)


def test_a_run_directory_means_its_newest_checkpoint(run: Path, capsys) -> None:
    assert main(["eval", str(EXAMPLES / "arithmetic.toml"), "--checkpoint", str(run), *_sets(),
                 "--set", "eval.num_samples=0"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{run / 'checkpoints' / 'step_3'} (step 3)"
    trained = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert out[1].split() == ["eval/accuracy", f"{trained['eval/accuracy']:.4f}"]
    assert not any("pass@" in line for line in out)


def test_a_path_without_a_model_is_a_clear_error(tmp_path: Path, capsys) -> None:
    assert main(["eval", str(EXAMPLES / "arithmetic.toml"), "--checkpoint", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"--checkpoint {tmp_path}: not a model directory (no config.json) and no step_<n> checkpoint under it" in err
    assert "Traceback" not in err


def test_eval_of_an_environment_config_runs_greedy_episodes(tmp_path: Path, capsys) -> None:
    from grpo_run.plugins.models.sources import CHECKPOINTS_DIR

    assert main(["eval", str(EXAMPLES / "calculator-tool.toml"), "--checkpoint", str(CHECKPOINTS_DIR / "tiny-arithmetic"),
                 "--json", "--set", "task.num_eval=8", "--output-dir", str(tmp_path / "eval")]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["eval/num_prompts"] == 8 and printed["eval/env/episodes"] == 8
    assert printed["eval/env/error_rate"] == 0 and 1 <= printed["eval/env/turns_mean"] <= 2
    assert "eval/env_reward_mean" in printed
    traces = [json.loads(line) for line in next((tmp_path / "eval" / "rollouts").glob("eval_*.jsonl")).read_text().splitlines()]
    assert all(t["turns"] for t in traces)  # each trace shows its episode's turns


def test_a_lora_checkpoint_scores_what_training_measured_after_its_step(tmp_path: Path, tiny_model_dir: Path,
                                                                        capsys) -> None:
    pytest.importorskip("peft", reason="LoRA needs the peft extra")
    cfg = write_run(tmp_path, verifier=DIGIT_SHARE, eval_rows=4,
                    model={"name_or_path": str(tiny_model_dir), "lora": {"r": 4, "alpha": 8}},
                    optim={"lr": 5e-2, "warmup_steps": 0}, train={"total_steps": 1, "local_eval_every": 1},
                    checkpoint={"save_freq": 1},
                    eval={"num_samples": 2})
    run = tmp_path / "run"
    assert main([str(cfg), "--output-dir", str(run)]) == 0
    checkpoint = run / "checkpoints" / "step_1"
    assert not (checkpoint / "config.json").exists()  # the adapter only, no full model beside it
    capsys.readouterr()
    assert main(["eval", str(cfg), "--checkpoint", str(checkpoint), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    trained = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    after = next(m for m in trained if m["step"] == 1 and "eval/accuracy" in m)
    adapter = load_file(checkpoint / "adapter_model.safetensors")
    lora_b = [v for k, v in adapter.items() if k.endswith("lora_B.weight")]
    assert lora_b and any(v.abs().max() > 0 for v in lora_b)  # the adapter moves the model (B starts at zero)
    for key in ("eval/accuracy", "eval/response_length_mean", "eval/pass@2"):
        assert printed[key] == after[key], key
