"""``grpo-run import``: the seeds' Open Instruct and ROLL configurations (tests/support/seed_configs)
and a TRL GRPOConfig become commented configs that check, and -- the model swapped for the
embedded one, sizes shrunk for a CPU -- run."""

from __future__ import annotations

import json
import tomllib

import pytest
from support.seed_configs import OPEN_INSTRUCT_KWARGS, OPEN_INSTRUCT_SCRIPT, ROLL_YAML

from grpo_run.cli.main import main

EMBEDDED = [  # the embedded model and its task instead of the source's model and hub data, CPU sizes
    "model.name_or_path=tiny-arithmetic", "model.dtype=float32", "data.train=[]", "data.eval=[]",
    "task.name=arithmetic", "task.max_operand=49", 'engine={name="hf"}', "learner={}",
    "rollout.num_unique_prompts_rollout=4", "rollout.num_samples_per_prompt_rollout=4", "rollout.response_length=8",
    "data.max_prompt_token_length=16", "train.total_steps=2", "train.local_eval_every=1",
    "checkpoint.save_final=false", "logging.progress=false", "trackers={}", "scoring.num_workers=0",
]


def imported(tmp_path, capsys, source, *extra: str) -> tuple[str, dict]:
    out = tmp_path / "config.toml"
    assert main(["import", str(source), "--output", str(out), *extra]) == 0
    err = capsys.readouterr().err
    assert f"wrote {out}" in err and f"next: grpo-run check {out}" in err
    text = out.read_text()
    return text, tomllib.loads(text)


def run_two_steps(tmp_path, capsys, config) -> list[dict]:
    sets = [w for s in EMBEDDED for w in ("--set", s)]
    assert main(["check", str(config), *sets]) == 0, capsys.readouterr().err
    run = tmp_path / "run"
    assert main([str(config), "--output-dir", str(run), *sets]) == 0, capsys.readouterr().err
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_the_open_instruct_seed_configuration_imports_and_runs(tmp_path, capsys) -> None:
    text, cfg = imported(tmp_path, capsys, OPEN_INSTRUCT_KWARGS)
    assert cfg["rollout"] == {"num_unique_prompts_rollout": 32, "num_samples_per_prompt_rollout": 8,
                              "response_length": 1024, "temperature": 0.8, "async_steps": 2}
    assert cfg["algorithm"]["pack_length"] == 2048 and cfg["scoring"]["verification_reward"] == 10.0
    assert [(s["hf_dataset"], s["weight"], s["verifier"]) for s in cfg["data"]["train"]] == [
        ("ai2-adapt-dev/rlvr_gsm8k_zs", 0.5, "math"), ("ai2-adapt-dev/rlvr_math_zs", 0.5, "math")]
    assert "math" in cfg["verifiers"]
    # Parity a porter would not guess, and each key's source in its comment.
    assert cfg["algorithm"]["advantage_std"] == "population"
    assert 'algorithm.advantage_std = "population": Open Instruct normalises advantages by the population std' in text
    assert "temperature = 0.8  # temperature=0.8" in text
    assert "total_steps = 390  # Open Instruct's default total_episodes 100000 / (32 prompts x 8 samples)" in text
    assert "model: Open Instruct grpo_fast's source names no model" in text
    steps = run_two_steps(tmp_path, capsys, tmp_path / "config.toml")
    assert [m["step"] for m in steps if "loss/policy" in m] == [1, 2]
    assert "eval/accuracy" in steps[0]


def test_the_roll_seed_configuration_imports_and_runs(tmp_path, capsys) -> None:
    text, cfg = imported(tmp_path, capsys, ROLL_YAML)
    assert cfg["rollout"]["num_unique_prompts_rollout"] == 64 and cfg["rollout"]["num_samples_per_prompt_rollout"] == 8
    assert cfg["rollout"]["response_length"] == 4096  # ${response_length}, resolved
    assert cfg["data"]["max_prompt_token_length"] == 2048 and cfg["algorithm"]["pack_length"] == 6144
    assert cfg["optim"] == {"lr": 1e-06, "weight_decay": 0, "warmup_steps": 20}
    assert cfg["data"]["train"] == [{"path": "xxx/train.json", "prompt_key": "instruction", "verifier": "math"}]
    # 64 x 8 samples over a global batch of 1 x 32 x 16 ranks: one optimizer step per rollout.
    assert ("num_mini_batches = 1  # 512 samples / (actor_train.training_args.per_device_train_batch_size: 1 x "
            "actor_train.training_args.gradient_accumulation_steps: 32 x 16 ranks)") in text
    assert cfg["engine"] == {"name": "vllm", "gpu_memory_utilization": 0.6, "max_model_len": 8000,
                             "tensor_parallel_size": 1}
    assert cfg["algorithm"]["loss_aggregation"] == "seq-mean-token-mean" and cfg["loss"]["clip_higher"] == 0.2
    header = text.split("\n\n")[0]
    assert "actor_train.strategy_args.strategy_name: megatron_train: strategy_name 'megatron_train' has no equivalent" \
        in header
    assert "actor_train.strategy_args.strategy_config.tensor_model_parallel_size: 1: no Megatron-style model" in header
    assert "advantages: ROLL's default adv_estimator is \"gae\"" in header
    steps = run_two_steps(tmp_path, capsys, tmp_path / "config.toml")
    assert [m["step"] for m in steps if "loss/policy" in m] == [1, 2]


def test_an_open_instruct_command_line_keeps_its_arithmetic(tmp_path, capsys) -> None:
    text, cfg = imported(tmp_path, capsys, OPEN_INSTRUCT_SCRIPT)
    assert cfg["model"]["name_or_path"] == "Qwen/Qwen2.5-7B" and cfg["run"]["name"] == "qwen_math_grpo"
    assert cfg["train"]["total_steps"] == 2_000_000 // (48 * 16)
    assert cfg["algorithm"]["loss_denominator"] == 2048.0  # 1024 per optimizer step x 2 mini-batches
    assert cfg["kl"] == {"beta": 0.01, "name": "k3"}
    assert cfg["learner"] == {"zero_stage": 2, "strategy": "deepspeed", "num_learners": 6}
    assert cfg["engine"] == {"tensor_parallel_size": 1, "name": "vllm", "num_engines": 2}
    assert cfg["verifiers"]["format"] == {"weight": 0.1}  # Open Instruct adds it unscaled by verification_reward 10
    assert cfg["verifiers"]["non_stop_penalty"] == {"mode": "gate", "gate_fail_reward": 0.0}
    assert [s["split"] for s in cfg["data"]["train"]] == ["train", "train"] and cfg["data"]["train"][1]["rows"] == 2000
    assert cfg["data"]["eval"] == [{"hf_dataset": "ai2-adapt-dev/rlvr_gsm8k_zs", "rows": 16, "verifier": "math",
                                    "split": "test"}]
    assert "--chat_template_name r1_simple_chat_postpend_think: the tokenizer's own chat template is used" in text
    sets = [w for s in EMBEDDED for w in ("--set", s)]
    assert main(["check", str(tmp_path / "config.toml"), *sets]) == 0


TRL_YAML = """\
model_name_or_path: Qwen/Qwen2-0.5B-Instruct
dataset_name: trl-lib/DeepMath-103K
learning_rate: 1.0e-6
per_device_train_batch_size: 4
gradient_accumulation_steps: 4
num_generations: 8
max_completion_length: 512
max_steps: 200
beta: 0.0
epsilon_high: 0.28
scale_rewards: none
use_vllm: false
report_to: wandb
"""


def test_a_trl_grpo_config_turns_its_batch_into_prompts_and_mini_batches(tmp_path, capsys) -> None:
    source = tmp_path / "grpo.yaml"
    source.write_text(TRL_YAML)
    text, cfg = imported(tmp_path, capsys, source)
    # 4 completions a device x 4 accumulated = 16 completions a step and a generation: 2 prompts x 8.
    assert cfg["rollout"] == {"num_samples_per_prompt_rollout": 8, "response_length": 512,
                              "num_unique_prompts_rollout": 2}
    assert cfg["train"]["total_steps"] == 200 and "num_mini_batches" not in cfg.get("algorithm", {})
    assert cfg["loss"] == {"name": "dapo", "clip_lower": 0.2, "clip_higher": 0.28}
    assert cfg["algorithm"]["advantage_normalization_type"] == "centered"
    assert cfg["data"]["train"] == [{"hf_dataset": "trl-lib/DeepMath-103K", "split": "train", "verifier": "math"}]
    assert "report_to: wandb: grpo-run calls it a [trackers.<name>] table" in text


@pytest.mark.parametrize(("content", "message"), [
    ("not: [valid", "not valid YAML"),
    ("echo hello\n", "no --arguments found"),
])
def test_unreadable_sources_are_one_line_errors(tmp_path, capsys, content, message) -> None:
    source = tmp_path / ("bad.yaml" if "[" in content else "bad.sh")
    source.write_text(content)
    assert main(["import", str(source), "--output", str(tmp_path / "c.toml")]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_an_existing_output_is_kept_unless_forced(tmp_path, capsys) -> None:
    out = tmp_path / "config.toml"
    out.write_text("mine")
    assert main(["import", str(ROLL_YAML), "--output", str(out)]) == 2
    assert "exists; choose another --output or add --force" in capsys.readouterr().err and out.read_text() == "mine"
    assert main(["import", str(ROLL_YAML), "--output", str(out), "--force"]) == 0


OPEN_INSTRUCT_VALUES = {  # a value of the right kind for each key the seeds name (flags: no value)
    "dataset_mixer_list": "ai2-adapt-dev/rlvr_gsm8k_zs 1.0", "dataset_mixer_eval_list": "ai2-adapt-dev/rlvr_gsm8k_zs 8",
    "dataset_transform_fn": "rlvr_tokenize_v1", "stop_strings": "</answer>", "kl_estimator": "kl3", "loss_fn": "dapo",
    "lr_scheduler_type": "linear", "advantage_normalization_type": "standard", "loss_denominator": "1024",
    "output_dir": "out", "wandb_project_name": "p", "wandb_entity": "e", "hf_repo_id": "me/r", "gs_bucket_path": "gs://b",
    "checkpoint_state_dir": "ckpt", "temperature": "0.7", "learning_rate": "1e-6", "beta": "0.01", "clip_lower": "0.2",
    "clip_higher": "0.28", "alpha": "0.6", "weight_decay": "0.0", "max_grad_norm": "1.0", "verification_reward": "10.0",
    "r1_style_format_reward": "1.0", "no_resampling_pass_rate": "0.9", "truncated_importance_sampling_ratio_cap": "2.0",
    "max_possible_score": "11.0", "push_to_hub": "true",
}


def test_every_open_instruct_key_the_seeds_name_lands_somewhere_said(tmp_path, capsys) -> None:
    """Moved (a key's comment names it), left out or to do by hand: none silently dropped."""
    from support.seed_configs import OPEN_INSTRUCT_KEYS

    words = [f"--{key} {OPEN_INSTRUCT_VALUES.get(key, '' if key in FLAGS else '2')}".rstrip()
             for key in OPEN_INSTRUCT_KEYS]
    script = tmp_path / "all.sh"
    script.write_text("python open_instruct/grpo_fast.py " + " ".join(words) + "\n")
    text, _ = imported(tmp_path, capsys, script)
    unsaid = [key for key in OPEN_INSTRUCT_KEYS if f"--{key}" not in text]
    assert unsaid == [], unsaid


FLAGS = {"active_sampling", "filter_zero_std_samples", "mask_truncated_completions", "mask_tool_use", "inflight_updates",
         "apply_verifiable_reward", "apply_r1_style_format_reward", "save_traces", "fused_optimizer",
         "deepspeed_offload_param", "deepspeed_offload_optimizer", "gather_whole_model", "with_tracking", "verbose",
         "single_gpu_mode", "enable_queue_dashboard", "use_vllm_logprobs", "load_ref_policy", "non_stop_penalty",
         "gradient_checkpointing", "record_entropy", "try_launch_beaker_eval_jobs_on_weka"}


def test_every_roll_key_path_the_guide_names_lands_somewhere_said(tmp_path, capsys) -> None:
    import yaml
    from support.seed_configs import ROLL_KEYS

    data: dict = {}
    for path in ROLL_KEYS:
        node = data
        *heads, last = path.split(".")
        for head in heads:
            node = node.setdefault(head, {})
        node[last] = {"dtype": "bf16"} if last in ("model_args", "strategy_args") else (
            "megatron_train" if last == "strategy_name" else "native" if last == "template" else
            "bf16" if last in ("dtype", "param_dtype") else "full" if last == "recompute_granularity" else 1)
    source = tmp_path / "rlvr_config.yaml"
    source.write_text(yaml.safe_dump(data))
    text, _ = imported(tmp_path, capsys, source)
    unsaid = [path for path in ROLL_KEYS if f"{path}:" not in text]
    assert unsaid == [], unsaid
