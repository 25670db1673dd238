"""The engine check catches engines that break the contract (no model: token ids are made up)."""

from __future__ import annotations

import random
import shutil

import attrs
import pytest

from grpo_run import (
    Completion,
    NoConfig,
    SamplingParams,
)
from grpo_run.testing import (
    check_engine,
)

HAVE_BWRAP = shutil.which("bwrap") is not None
FAST = 0.5
"""Scorer time limit for this module's own (instant) verifiers."""



# =============================================================================================
# Engines that break the contract (no model: token ids are made up)
# =============================================================================================


class FakeEngine:
    """Greedy: the prompt's tokens reversed; sampled: seeded random tokens. Streams one prompt at
    a time; its state is the number of sampled calls (the sampling seed)."""

    name = "fake"
    Config = NoConfig

    def __init__(self, config: NoConfig, context) -> None:
        self.seed, self.calls, self.version = context.seed, 0, 0

    async def generate(self, prompts, params: SamplingParams):
        self.calls += 1
        rng = random.Random(self.seed * 1000 + self.calls)
        return [[self._completion(prompt, params, rng) for _ in range(params.n)] for prompt in prompts]

    def _completion(self, prompt, params: SamplingParams, rng: random.Random) -> Completion:
        if params.greedy:
            tokens = tuple(reversed(prompt))[: params.max_new_tokens]
        else:
            tokens = tuple(rng.randrange(50) for _ in range(rng.randint(1, params.max_new_tokens)))
        finish = "length" if len(tokens) == params.max_new_tokens else "stop"
        return Completion(token_ids=tokens, logprobs=tuple(-0.5 for _ in tokens), text="", finish_reason=finish,
                          policy_version=self.version)

    async def generate_stream(self, prompts, params: SamplingParams):
        for index, prompt in enumerate(prompts):
            yield index, (await self.generate([prompt], params))[0]

    async def update_weights(self, state_dict, version: int) -> None:
        self.version = version

    def state_dict(self):
        return {"calls": self.calls}

    def load_state_dict(self, state) -> None:
        self.calls = int(state["calls"])

    def close(self) -> None:
        pass


class OneShortEngine(FakeEngine):
    name = "one-short"

    async def generate(self, prompts, params: SamplingParams):
        return [group[:-1] for group in await super().generate(prompts, params)]


class PositiveLogprobEngine(FakeEngine):
    name = "positive-logprob"

    def _completion(self, prompt, params, rng):
        completion = super()._completion(prompt, params, rng)
        return attrs.evolve(completion, logprobs=(0.5,) * len(completion.token_ids))


class StaleVersionEngine(FakeEngine):
    name = "stale-version"

    async def update_weights(self, state_dict, version: int) -> None:
        pass


class NoisyGreedyEngine(FakeEngine):
    name = "noisy-greedy"

    def _completion(self, prompt, params, rng):
        return super()._completion(prompt, attrs.evolve(params, greedy=False), rng)


class DoubleStreamEngine(FakeEngine):
    name = "double-stream"

    async def generate_stream(self, prompts, params):
        async for index, group in super().generate_stream(prompts, params):
            yield 0, group


class EosReasonEngine(FakeEngine):
    name = "eos-reason"

    def _completion(self, prompt, params, rng):
        return attrs.evolve(super()._completion(prompt, params, rng), finish_reason="eos")


class ForgetfulEngine(FakeEngine):
    name = "forgetful-engine"

    def load_state_dict(self, state) -> None:
        pass


def _fake_context():
    import torch

    from grpo_run import EngineContext

    return EngineContext(model_path="unused", tokenizer=None, dtype=torch.float32, device="cpu", seed=1)


PROMPTS = [[1, 2, 3], [4, 5, 6, 7], [8, 9]]


@pytest.mark.parametrize(
    ("cls", "message"),
    [
        (FakeEngine, None),
        (OneShortEngine, r"^engine 'one-short': generate: prompt 0: got 1 completions, expected n=2$"),
        (PositiveLogprobEngine, r"^engine 'positive-logprob': generate: prompt 0: log-prob 0\.5 is not a finite "
                                r"float <= 0$"),
        (StaleVersionEngine, r"^engine 'stale-version': update_weights: prompt 0: policy_version 0, expected 7 "
                             r"\(set by update_weights\)$"),
        (NoisyGreedyEngine, r"^engine 'noisy-greedy': greedy: prompt 0: the 2 greedy completions of one group differ$"),
        (DoubleStreamEngine, r"^engine 'double-stream': streaming: yielded prompt indices \[0, 0, 0\]; expected "
                             r"each of 0\.\.2 once$"),
        (EosReasonEngine, r"^engine 'eos-reason': generate: prompt 0: finish_reason 'eos', expected 'stop' or "
                          r"'length'$"),
        (ForgetfulEngine, r"^engine 'forgetful-engine': state: an engine loaded with state_dict\(\) \{'calls': 8\} "
                          r"sampled .*; the original sampled "),
    ],
)
def test_engines(cls: type, message: str | None) -> None:
    if message is None:
        check_engine(cls, None, _fake_context(), prompts=PROMPTS, weights={})
        return
    with pytest.raises(AssertionError, match=message):
        check_engine(cls, None, _fake_context(), prompts=PROMPTS, weights={})


