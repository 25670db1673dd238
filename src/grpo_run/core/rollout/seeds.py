"""Sampling seeds as a pure function of what is sampled.

Every generate call the loop makes carries ``SamplingParams.seed``, derived from the run's seed
and the call's identity: training batch ``i`` (and its active-sampling round), or the evaluation
after step ``k``. No running count of calls is involved, so a call that a resumed run skips (the
evaluation of a step interrupted during its learner step) or repeats cannot shift the seeds of
the calls after it. Engines derive per-chunk or per-completion seeds from it and the prompt and
sample index (the ``hf`` and ``vllm`` engines, and :class:`~grpo_run.core.placement.engines.EnginePool`
for each engine's share).

numpy's ``SeedSequence`` does the mixing: well-spread 32-bit seeds from any tuple of integers.
"""

from __future__ import annotations

import numpy as np

TRAIN, EVAL, CHUNK = 1, 2, 3
"""What a seed is for (the first key): distinct streams for training, evaluation and a chunk of a call."""

_MODULUS = 1 << 64


def derive_seed(base: int, *keys: int) -> int:
    """A 31-bit seed determined by ``base`` and ``keys`` alone (any integers, negative too)."""
    entropy = [base % _MODULUS, *(k % _MODULUS for k in keys)]
    return int(np.random.SeedSequence(entropy).generate_state(1, np.uint32)[0]) >> 1


def train_seed(run_seed: int, batch: int, round_: int = 0) -> int:
    """The seed of training batch ``batch`` (1-based), active-sampling round ``round_`` (0 first)."""
    return derive_seed(run_seed, TRAIN, batch, round_)


def eval_seed(run_seed: int, step: int) -> int:
    """The seed of the evaluation after learner step ``step``."""
    return derive_seed(run_seed, EVAL, step)


def chunk_seed(seed: int, first_prompt: int, first_sample: int = 0) -> int:
    """The seed of the part of a call that starts at prompt ``first_prompt``, sample ``first_sample``."""
    return derive_seed(seed, CHUNK, first_prompt, first_sample)
