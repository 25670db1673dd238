"""A reward model steers learning, end to end through ``grpo-run``, on the embedded task.

The reward model is built here from the shipped ``tiny-arithmetic`` model's shape and fitted in
seconds to prefer completions that end in an even digit. GRPO on the arithmetic prompts with only
that reward moves the share of even endings up within a few steps (the warm start answers sum or
sum + 1, about half even); the same run with a reward model whose head is zero (a constant reward)
leaves it where it was. The same model named in ``reward_funcs`` by a script gives the same scores.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
from support.paths import EXAMPLES
from support.reward_models import TEMPLATE, ends_even, fit_reward_model

import grpo_run
from grpo_run.cli.main import main
from grpo_run.core.config.toml_writer import dumps_toml

STEPS = 6


@pytest.fixture(scope="module")
def reward_models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("reward-models")
    return {"even": fit_reward_model(root / "even", ends_even), "flat": fit_reward_model(root / "flat", None)}


def arithmetic_config(path: Path, verifiers: dict, *, steps: int, lr: float = 1e-3) -> Path:
    """examples/arithmetic.toml, rewarded by ``verifiers`` alone, ``steps`` steps, every rollout traced."""
    cfg = tomllib.loads((EXAMPLES / "arithmetic.toml").read_text())
    cfg["verifiers"] = verifiers
    cfg["scoring"] = {"row_verifiers": False}  # the task's rows name "math": plain data here
    cfg["train"].update(total_steps=steps, local_eval_every=0, max_runtime_s=0, stop_at_eval_accuracy=0)
    cfg["optim"].update(lr=lr, warmup_steps=0)
    cfg["checkpoint"] = {"save_freq": 0, "save_final": False}
    cfg["logging"] = {"log_rollouts_every": 1, "progress": False}
    path.write_text(dumps_toml(cfg), encoding="utf-8")
    return path


def traces(run: Path, step: int) -> list[dict]:
    return [json.loads(line) for line in (run / "rollouts" / f"step_{step}.jsonl").read_text().splitlines()]


def even_share(run: Path) -> list[float]:
    """The share of each step's sampled completions that end in an even digit."""
    return [sum(ends_even(t["completion"]) for t in traces(run, s)) / len(traces(run, s)) for s in range(1, STEPS + 1)]


@pytest.mark.slow  # fitting the reward model (~10 s) and two runs of 6 steps of 16 x 8 samples (~20 s each)
def test_a_reward_model_moves_the_policy_towards_what_it_prefers_and_a_constant_one_does_not(
        tmp_path, reward_models) -> None:
    rng = random.Random(3)
    sums = [(rng.randint(0, 49), rng.randint(0, 49), rng.choice([-1, 0, 1, 2])) for _ in range(64)]
    rows = [{"prompt": f"{a}+{b}", "completion": str(a + b + d)} for a, b, d in sums]
    judged = grpo_run.score(rows, verifiers={"reward_model": {"model": str(reward_models["even"]), "template": TEMPLATE}})
    assert sum((r["reward"] > 0) == ends_even(r["completion"]) for r in judged) >= 0.9 * len(rows)  # it learnt the property

    shares = {}
    for name, model in reward_models.items():
        config = arithmetic_config(tmp_path / f"{name}.toml", {"reward_model": {"model": str(model), "template": TEMPLATE}},
                                   steps=STEPS)
        assert main([str(config), "--output-dir", str(tmp_path / name)]) == 0
        shares[name] = even_share(tmp_path / name)
    even, flat = shares["even"], shares["flat"]
    assert even[0] == flat[0]  # step 1: the same policy sampled the same completions
    # Measured: even 0.49 -> 0.95 in 6 steps; flat 0.49, 0.50, 0.47, 0.50, 0.54, 0.46.
    assert sum(even[-2:]) / 2 >= sum(even[:2]) / 2 + 0.2, even
    assert abs(sum(flat[-2:]) / 2 - sum(flat[:2]) / 2) < 0.1, flat
    metrics = [json.loads(line) for line in (tmp_path / "flat" / "metrics.jsonl").read_text().splitlines()]
    assert all(m["rollout/real_batch_size_ratio"] == 0 for m in metrics if m["step"] >= 1)  # no signal, no update
    pipeline = json.loads((tmp_path / "even" / "pipeline.json").read_text())
    (where,) = pipeline["scoring"]
    assert where["verifiers"] == ["reward_model"] and where["where"] == "worker processes of its own"
    assert len(where["pids"]) == 1


@pytest.mark.slow  # two runs of 2 steps, one of them a script in its own interpreter
def test_a_script_naming_the_model_in_reward_funcs_scores_as_the_toml_verifier(tmp_path, reward_models) -> None:
    model = str(reward_models["even"])
    toml = arithmetic_config(tmp_path / "toml.toml", {"reward_model": {"model": model}}, steps=2)
    assert main([str(toml), "--output-dir", str(tmp_path / "toml")]) == 0
    base = arithmetic_config(tmp_path / "base.toml", {}, steps=2)
    (tmp_path / "train.py").write_text(textwrap.dedent(f"""
        import grpo_run
        result = grpo_run.train({str(base)!r}, reward_funcs=[{model!r}], output_dir={str(tmp_path / "script")!r})
        print("RESULT", result.config.verifiers["reward_model"].model)
    """), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("RESULT ") == 1 and f"RESULT {model}" in proc.stdout
    for step in (1, 2):
        by_toml, by_script = traces(tmp_path / "toml", step), traces(tmp_path / "script", step)
        assert [t["completion"] for t in by_script] == [t["completion"] for t in by_toml]
        assert [t["scores"]["reward_model"] for t in by_script] == [t["scores"]["reward_model"] for t in by_toml]
        assert len({t["scores"]["reward_model"] for t in by_toml}) > 10  # scores that tell completions apart
