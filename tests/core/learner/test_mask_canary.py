"""The mask canary: an environment that always answers the same string. Trained on, its ids
become likely (+9 nats over 15 steps here); masked (the default), nothing pushes them up -- they
drift only through the weights they share with the sampled ids (-2 nats here) -- while the
sampled ids around them are learnt."""

from __future__ import annotations

import torch

from grpo_run.core.learner.learner import Learner
from grpo_run.core.learner.logprobs import completion_logprobs
from grpo_run.core.rollout.packing import SequenceToPack, pack_sequences
from grpo_run.plugins.losses.dapo import DapoLoss
from support.learner import make_spec, tiny_model

PROMPT = [2, 3]
TURN1, CANARY, TURN2 = [5, 6, 1], [17, 11, 19, 13], [7, 1]
SAMPLED = (True,) * 3 + (False,) * 4 + (True,) * 2


def episodes(train_on_env_tokens: bool) -> list[SequenceToPack]:
    mask = None if train_on_env_tokens else SAMPLED
    completion = TURN1 + CANARY + TURN2
    logprobs = [-3.0] * 3 + ([-3.0] if train_on_env_tokens else [float("nan")]) * 4 + [-3.0] * 2
    # Two samples of the group: the same episode rewarded, and a short one that was not.
    return [SequenceToPack(PROMPT, completion, 1.0, logprobs, 0, token_mask=mask),
            SequenceToPack(PROMPT, [8, 1], -1.0, [-3.0, -3.0], 1)]


def token_logprobs(model) -> torch.Tensor:
    seq = SequenceToPack(PROMPT, TURN1 + CANARY + TURN2, 0.0, [0.0] * 9, 0)
    batch = pack_sequences([seq], 32, 0)
    with torch.no_grad():
        lp, _ = completion_logprobs(model, batch, temperature=1.0)
    return lp[0, len(PROMPT):len(PROMPT) + 9]


def canary_run(train_on_env_tokens: bool, steps: int = 15) -> tuple[torch.Tensor, torch.Tensor]:
    model = tiny_model(seed=3)
    before = token_logprobs(model)
    learner = Learner(make_spec(), model, None, DapoLoss(), None)
    for _ in range(steps):
        learner.train_step(episodes(train_on_env_tokens))
    return before, token_logprobs(model)


def test_masked_environment_text_is_not_learnt_and_trained_text_is():
    before, masked = canary_run(False)
    _, trained = canary_run(True)
    canary = slice(3, 7)
    masked_gain = float((masked[canary] - before[canary]).sum())
    trained_gain = float((trained[canary] - before[canary]).sum())
    sampled_gain = float((masked[:3] - before[:3]).sum())
    assert trained_gain > 2.0, trained_gain  # the canary became likely when trained on
    assert sampled_gain > 2.0, sampled_gain  # the masked run did learn its own tokens
    assert masked_gain < 0.1 * trained_gain, (masked_gain, trained_gain)  # a leaking mask gives ~ trained_gain
