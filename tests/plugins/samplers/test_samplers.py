"""The uniform, mixture and active prompt samplers: proportions, retirement, determinism, resume."""

from __future__ import annotations

import collections
import json

import attrs
import cattrs
import pytest

from grpo_run.core.config.hooks import register_strict_hooks
from grpo_run.core.errors import RunError
from grpo_run.plugins.samplers.active import ActiveSampler, ActiveSamplerConfig, AllPromptsRetiredError
from grpo_run.plugins.samplers.common import ShuffledEpochs
from grpo_run.plugins.samplers.mixture import MixtureSampler, MixtureSamplerConfig
from grpo_run.plugins.samplers.uniform import UniformSampler, UniformSamplerConfig


def _rows(sizes: dict[str, int], key: str = "dataset") -> list[dict]:
    return [{"id": f"{src}-{i}", key: src, "prompt": f"q{i}"} for src, n in sizes.items() for i in range(n)]


def _ids(rows: list) -> list[str]:
    return [r["id"] for r in rows]


SIZES = {"math": 10, "code": 3, "chat": 5}
WEIGHTS = {"math": 1.0, "code": 2.0, "chat": 1.0}


# --- uniform --------------------------------------------------------------------------------------


def test_uniform_draws_equal_shuffled_epochs() -> None:
    rows = _rows({"p": 5})
    sampler = UniformSampler(UniformSamplerConfig(), rows, seed=3)
    cursor = ShuffledEpochs(5, seed=3)
    drawn = _ids(sampler.sample(12))
    assert drawn == [f"p-{cursor.next()}" for _ in range(12)]
    # Pinned: the permutation of seed 3 (random.Random(3 * 7919 + epoch)) that old runs drew.
    assert drawn == ["p-4", "p-0", "p-2", "p-1", "p-3", "p-1", "p-2", "p-4", "p-3", "p-0", "p-3", "p-0"]
    assert sampler.state_dict() == {"epoch": 2, "position": 2} == cursor.state_dict()
    unshuffled = UniformSampler(UniformSamplerConfig(shuffle=False), rows, seed=3)
    assert _ids(unshuffled.sample(7)) == ["p-0", "p-1", "p-2", "p-3", "p-4", "p-0", "p-1"]


def test_uniform_state_round_trip_and_bad_state() -> None:
    rows = _rows({"p": 5})
    uninterrupted = _ids(UniformSampler(UniformSamplerConfig(), rows, seed=3).sample(12))
    first = UniformSampler(UniformSamplerConfig(), rows, seed=3)
    head = _ids(first.sample(7))
    state = json.loads(json.dumps(first.state_dict()))
    assert state == {"epoch": 1, "position": 2}  # the checkpoint format of earlier versions
    resumed = UniformSampler(UniformSamplerConfig(), rows, seed=3)
    resumed.load_state_dict(state)
    assert head + _ids(resumed.sample(5)) == uninterrupted
    with pytest.raises(ValueError, match="sampler state out of range: epoch 0, position 6 of 5"):
        resumed.load_state_dict({"epoch": 0, "position": 6})
    with pytest.raises(ValueError, match="sampler state out of range: epoch -1, position 0 of 5"):
        resumed.load_state_dict({"epoch": -1, "position": 0})
    with pytest.raises(ValueError, match="the uniform sampler needs at least one row"):
        UniformSampler(UniformSamplerConfig(), [], seed=0)


# --- mixture --------------------------------------------------------------------------------------


def test_mixture_proportions_and_epochs_within_sources() -> None:
    sampler = MixtureSampler(MixtureSamplerConfig(weights=WEIGHTS), _rows(SIZES), seed=0)
    drawn = sampler.sample(4000)
    by_source = collections.Counter(r["dataset"] for r in drawn)
    # Shares 1/4, 1/2, 1/4: the round-robin keeps every source within one row of its share.
    assert abs(by_source["math"] - 1000) <= 1 and abs(by_source["code"] - 2000) <= 1 and abs(by_source["chat"] - 1000) <= 1
    # ... after every prefix too, not just at the end.
    counts = collections.Counter()
    for n, row in enumerate(drawn[:200], start=1):
        counts[row["dataset"]] += 1
        for src, w in WEIGHTS.items():
            assert abs(counts[src] - n * w / 4) <= 1, (n, src)
    # Within a source, shuffled epochs: each epoch of "code" (3 rows) holds every row once.
    code = [r["id"] for r in drawn if r["dataset"] == "code"]
    for start in range(0, 30, 3):
        assert sorted(code[start : start + 3]) == ["code-0", "code-1", "code-2"]
    per_row = collections.Counter(_ids(drawn))
    assert {per_row[f"math-{i}"] for i in range(10)} == {100}


def test_mixture_deterministic_by_seed() -> None:
    rows = _rows(SIZES)
    a = _ids(MixtureSampler(MixtureSamplerConfig(weights=WEIGHTS), rows, seed=3).sample(60))
    b = _ids(MixtureSampler(MixtureSamplerConfig(weights=WEIGHTS), rows, seed=3).sample(60))
    c = _ids(MixtureSampler(MixtureSamplerConfig(weights=WEIGHTS), rows, seed=4).sample(60))
    assert a == b and a != c
    # Weight order in the table does not matter.
    reordered = MixtureSamplerConfig(weights=dict(reversed(list(WEIGHTS.items()))))
    assert _ids(MixtureSampler(reordered, rows, seed=3).sample(60)) == a
    unshuffled = _ids(MixtureSampler(MixtureSamplerConfig(weights=WEIGHTS, shuffle=False), rows, seed=3).sample(6))
    assert [i for i in unshuffled if i.startswith("code")] == ["code-0", "code-1", "code-2"]


def test_mixture_state_round_trip() -> None:
    rows = _rows(SIZES)
    config = MixtureSamplerConfig(weights=WEIGHTS)
    uninterrupted = _ids(MixtureSampler(config, rows, seed=1).sample(37 + 50))
    first = MixtureSampler(config, rows, seed=1)
    head = _ids(first.sample(37))
    state = json.loads(json.dumps(first.state_dict()))  # plain data, as a checkpoint stores it
    resumed = MixtureSampler(config, rows, seed=1)
    resumed.load_state_dict(state)
    assert head + _ids(resumed.sample(50)) == uninterrupted
    with pytest.raises(ValueError, match="this run mixes"):
        MixtureSampler(MixtureSamplerConfig(weights={"math": 1.0}), _rows({"math": 2}), seed=1).load_state_dict(state)


def test_mixture_custom_source_key() -> None:
    rows = _rows({"a": 2, "b": 2}, key="task")
    drawn = MixtureSampler(MixtureSamplerConfig(weights={"a": 3, "b": 1}, source_key="task"), rows, seed=0).sample(8)
    assert collections.Counter(r["task"] for r in drawn) == {"a": 6, "b": 2}


def test_mixture_rejects_mismatched_sources() -> None:
    rows = _rows(SIZES)
    with pytest.raises(ValueError, match="missing from 'weights': chat, code"):
        MixtureSampler(MixtureSamplerConfig(weights={"math": 1.0}), rows, seed=0)
    with pytest.raises(ValueError, match="names data sources with no rows: poetry"):
        MixtureSampler(MixtureSamplerConfig(weights={**WEIGHTS, "poetry": 1.0}), rows, seed=0)
    with pytest.raises(ValueError, match=r"1 rows have no 'dataset' key \(rows orphan\)"):
        MixtureSampler(MixtureSamplerConfig(weights=WEIGHTS), [*rows, {"id": "orphan"}], seed=0)


def test_mixture_config_validated() -> None:
    for weights in ({}, {"a": 0.0}, {"a": -1.0}, {"a": float("inf")}):
        with pytest.raises(ValueError, match="weights"):
            MixtureSamplerConfig(weights=weights)
    with pytest.raises(TypeError):
        MixtureSamplerConfig()  # type: ignore[call-arg]
    converter = cattrs.Converter()
    register_strict_hooks(converter)
    config = converter.structure({"weights": {"math": 2, "code": 0.5}}, MixtureSamplerConfig)
    assert config.weights == {"math": 2.0, "code": 0.5} and config.source_key == "dataset"


# --- active ----------------------------------------------------------------------------------------


def _active(threshold: float | None = 1.0, n: int = 6, seed: int = 0) -> ActiveSampler:
    return ActiveSampler(ActiveSamplerConfig(no_resampling_pass_rate=threshold), _rows({"p": n}), seed)


def test_active_draws_like_uniform_until_feedback() -> None:
    rows = _rows({"p": 6})
    uniform = UniformSampler(UniformSamplerConfig(), rows, seed=5)
    active = ActiveSampler(ActiveSamplerConfig(), rows, seed=5)
    assert _ids(active.sample(20)) == _ids(uniform.sample(20))
    assert ActiveSampler.wants_nonzero_std is True


def test_active_retires_solved_prompts() -> None:
    sampler = _active(threshold=1.0)
    sampler.update("p-0", [1.0, 1.0, 1.0, 1.0], [True] * 4)  # pass rate 1 -> retired
    sampler.update("p-1", [1.0, 1.0, 1.0, 0.0], [True, True, True, False])  # 0.75 < 1 -> stays
    sampler.update("p-2", [1.5, 1.0], [True, True])  # the rewards do not matter: a format reward beside math
    assert sampler.retired == {"p-0", "p-2"} and sampler.num_retired == 2
    assert sampler.pass_rates == {"p-0": 1.0, "p-1": 0.75, "p-2": 1.0}
    drawn = collections.Counter(_ids(sampler.sample(40)))
    assert set(drawn) == {"p-1", "p-3", "p-4", "p-5"} and set(drawn.values()) == {10}


def test_active_threshold_and_latest_group() -> None:
    sampler = _active(threshold=0.5)
    sampler.update("p-0", [2.0, 2.0, 0.0, 1.0], [True, True, False, False])  # 2 of 4 solved -> 0.5 -> retired
    sampler.update("p-1", [2.0, 0.0, 0.0, 1.0], [True, False, False, False])  # 0.25 -> stays
    sampler.update("p-1", [2.0, 2.0, 2.0, 2.0], [False] * 4)  # latest group counts: 0.0 (full reward, none correct)
    assert sampler.retired == {"p-0"} and sampler.pass_rates["p-1"] == 0.0
    never = _active(threshold=None)
    never.update("p-0", [1.0, 1.0], [True, True])
    assert never.retired == set() and never.pass_rates["p-0"] == 1.0


def test_active_all_retired_raises() -> None:
    sampler = _active(n=2)
    sampler.update("p-0", [1.0], [True])
    assert _ids(sampler.sample(3)) == ["p-1"] * 3
    sampler.update("p-1", [1.0], [True])
    with pytest.raises(AllPromptsRetiredError, match="all 2 prompts are retired") as info:
        sampler.sample(1)
    assert isinstance(info.value, RunError)


def test_active_feedback_errors() -> None:
    sampler = _active()
    with pytest.raises(KeyError, match="no prompt with id 'nope'"):
        sampler.update("nope", [1.0], [True])
    with pytest.raises(ValueError, match="empty group"):
        sampler.update("p-0", [], [])
    with pytest.raises(ValueError, match="duplicated ids: a"):
        ActiveSampler(ActiveSamplerConfig(), [{"id": "a"}, {"id": "a"}], 0)
    with pytest.raises(ValueError, match="rows without an id: #1"):
        ActiveSampler(ActiveSamplerConfig(), [{"id": "a"}, {"prompt": "x"}], 0)


def test_active_state_round_trip() -> None:
    def run(sampler: ActiveSampler, steps: range) -> list[str]:
        out = []
        for _ in steps:
            batch = sampler.sample(4)
            out += _ids(batch)
            for row in batch:  # deterministic feedback: even-numbered prompts get solved
                solved = int(row["id"].split("-")[1]) % 2 == 0
                sampler.update(row["id"], [1.0 if solved else 0.0] * 4, [solved] * 4)
        return out

    uninterrupted = run(_active(n=11, seed=2), range(7))
    first = _active(n=11, seed=2)
    head = run(first, range(3))
    state = json.loads(json.dumps(first.state_dict()))
    assert state["retired"] and state["epoch"] >= 0
    resumed = _active(n=11, seed=2)
    resumed.load_state_dict(state)
    assert resumed.retired == first.retired and resumed.pass_rates == first.pass_rates
    assert head + run(resumed, range(4)) == uninterrupted


def test_active_config_validated() -> None:
    assert ActiveSamplerConfig().no_resampling_pass_rate == 1.0
    for bad in (0.0, -0.5, 1.01):
        with pytest.raises(ValueError, match="no_resampling_pass_rate"):
            ActiveSamplerConfig(no_resampling_pass_rate=bad)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        ActiveSamplerConfig().shuffle = False  # type: ignore[misc]


def test_samplers_registered() -> None:
    from grpo_run.plugins import samplers

    seen: list[type] = []
    samplers.grpo_run_register_samplers(seen.append)
    assert {cls.name for cls in seen} == {"uniform", "mixture", "active"}
