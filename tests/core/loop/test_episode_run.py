"""A whole run of episodes through the CLI: the calculator-tool example, shortened."""

from __future__ import annotations

import json

from grpo_run.cli.main import main
from support.paths import EXAMPLES


def test_the_calculator_tool_example_trains_on_episodes(tmp_path):
    out = tmp_path / "out"
    overrides = ["rollout.num_unique_prompts_rollout=4", "rollout.num_samples_per_prompt_rollout=4",
                 "train.total_steps=2", "optim.warmup_steps=1", "logging.progress=false"]
    argv = [str(EXAMPLES / "calculator-tool.toml"), "--output-dir", str(out)]
    for override in overrides:
        argv += ["--set", override]
    assert main(argv) == 0
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [0, 1, 2]
    assert 0 <= lines[0]["eval/accuracy"] <= 1 and lines[0]["eval/num_prompts"] == 64  # greedy episodes
    for line in lines[1:]:
        assert line["env/episodes"] == 16 and line["env/error_rate"] == 0
        assert 1 <= line["env/turns_mean"] <= 2 and line["env/segments_mean"] == 1
    effective = (out / "config.toml").read_text()
    assert "[environment]" in effective and 'name = "tiny-chat"' in effective and "[tools.calculator]" in effective
