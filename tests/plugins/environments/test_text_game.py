"""The ``text_game`` environment with the guess-a-digit game of the test tree (import-path
backend, offline): golden ids and masks of an episode, one initial state per group, broken games
dropped and counted, config mistakes named by key, and a short training run."""

from __future__ import annotations

import asyncio
import json
import math

import pytest

import grpo_run
from grpo_run.cli.main import main
from grpo_run.core.config.environment import EnvironmentSlot
from grpo_run.core.errors import RunError
from grpo_run.core.plugins.types import SamplingParams
from grpo_run.core.rollout.episode_producer import EpisodeProducer
from grpo_run.core.rollout.episode_runner import EpisodeFailed, EpisodeRunner
from grpo_run.core.rollout.episodes import derive_seed
from grpo_run.plugins.environments.text_game import TextGameConfig, TextGameEnvironment
from grpo_run.plugins.models.sources import CHECKPOINTS_DIR
from grpo_run.plugins.renderers.tiny import TinyChatConfig, TinyChatRenderer
from support import games
from support.episodes import ScriptedEngine

GAME = "support.games:GuessDigit"
EOS, USER, ASSISTANT = 1, 2, 3
G = 4


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(CHECKPOINTS_DIR / "tiny-arithmetic")


def game_env(backend: str = GAME, **args) -> TextGameEnvironment:
    return TextGameEnvironment(TextGameConfig(backend=backend, env_args=args), {})


def runner(tokenizer, env, script, *, n=1, step_timeout_s=5.0):
    engine = ScriptedEngine(tokenizer, script, "<|assistant|>")
    settings = EnvironmentSlot("text_game", max_turns=4, step_timeout_s=step_timeout_s)
    return EpisodeRunner(env, TinyChatRenderer(TinyChatConfig(), tokenizer), engine, settings,
                         SamplingParams(n=n, max_new_tokens=64)), engine


def test_a_guess_a_digit_episode_has_golden_ids_masks_and_rewards(tokenizer):
    def ids(text):  # the char vocabulary, one id per character
        return tokenizer.convert_tokens_to_ids(list(text))

    # seed 7: secret random.Random(7).randrange(10) == 5; guesses 3 (higher), 8 (lower), 5 (right)
    run, engine = runner(tokenizer, game_env(max_guesses=3), ["3", "8", "5"])
    try:
        episode = asyncio.run(run.run({"id": "r", "prompt": "ignored"}, 7, 0))
    finally:
        run.close()
    prompt = [USER] + ids("Guess a digit.") + [ASSISTANT]
    turns = [ids("3") + [EOS], ids("8") + [EOS], ids("5") + [EOS]]
    bridges = [[USER] + ids("Higher.") + [ASSISTANT], [USER] + ids("Lower.") + [ASSISTANT]]
    (seg,) = episode.segments
    assert list(seg.prompt_ids) == prompt
    assert list(seg.completion_ids) == turns[0] + bridges[0] + turns[1] + bridges[1] + turns[2]
    assert list(seg.sampled) == [True] * 2 + [False] * 9 + [True] * 2 + [False] * 8 + [True] * 2
    assert [math.isnan(x) for x in seg.logprobs] == [not s for s in seg.sampled]
    assert [m["content"] for m in episode.messages] == ["Guess a digit.", "3", "Higher.", "8", "Lower.", "5"]
    assert [m["role"] for m in episode.messages] == ["user", "assistant"] * 3
    assert episode.env_reward == 1.0 and episode.turns == 3 and episode.text == "5"
    assert episode.metrics["env/game_truncated"] == 0.0
    # token-in/token-out: each turn's prompt is exactly the ids so far
    assert [call[0] for call in engine.calls] == [prompt, prompt + turns[0] + bridges[0],
                                                  prompt + turns[0] + bridges[0] + turns[1] + bridges[1]]


def test_a_game_that_runs_out_of_guesses_is_truncated_with_no_reward(tokenizer):
    run, _ = runner(tokenizer, game_env(max_guesses=2), ["0", "1"])  # secret 5
    try:
        episode = asyncio.run(run.run({"id": "r"}, 7, 0))
    finally:
        run.close()
    assert episode.turns == 2 and episode.env_reward == 0.0 and episode.metrics["env/game_truncated"] == 1.0


class Sampler:
    def sample(self, n):
        return [{"id": f"r{i}", "prompt": "x"} for i in range(n)]

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


class Scorer:
    """No verifier: the game's rewards are the episode's."""

    async def score(self, rows, texts, finish_reasons=None, num_tokens=None, *, training=True):
        from grpo_run.core.scoring.metrics import ScoringMetrics
        from grpo_run.core.scoring.scorer import ScoredBatch, ScoredCompletion

        return ScoredBatch([ScoredCompletion(0.0, 1.0, {}) for _ in rows], ScoringMetrics())


class Encoder:
    def encode(self, row):
        return [0]


def producer(tokenizer, env, script, **kw):
    run, engine = runner(tokenizer, env, script, n=G, **kw)
    return EpisodeProducer(Sampler(), engine, Scorer(), Encoder(), run.params, 3, runner=run, run_seed=1,
                           env_name="text_game")


def test_the_episodes_of_a_group_play_the_same_game(tokenizer, monkeypatch):
    secrets: list[tuple[int, int]] = []
    reset = games.GuessDigit.reset

    def recording(self, seed=None):
        out = reset(self, seed)
        secrets.append((seed, self.secret))
        return out

    monkeypatch.setattr(games.GuessDigit, "reset", recording)
    prod = producer(tokenizer, game_env(max_guesses=1), ["4"])
    try:
        batch = asyncio.run(prod.produce(1))
    finally:
        prod.close()
    seeds = [derive_seed(1, "group", i) for i in range(3)]
    assert sorted(secrets) == sorted((s, __import__("random").Random(s).randrange(10)) for s in seeds for _ in range(G))
    for group in batch.groups:  # one game per group: the same feedback and reward for every sample
        assert len(group.completions) == G
        assert len({tuple(m["content"] for m in e.messages) for e in group.completions}) == 1
        assert len(set(group.rewards)) == 1


@pytest.mark.parametrize("fail", ["raise", "garbage"])
def test_a_broken_game_fails_every_episode_and_stops_the_run(tokenizer, fail):
    # Each failed episode is dropped and counted; a batch with no episode left stops the run.
    prod = producer(tokenizer, game_env("support.games:BrokenGame", fail=fail), ["4"])
    try:
        with pytest.raises(RunError, match=r"^step 1: all \d+ episodes failed, so there is nothing to train on: "
                                           r"environment '.*' failed \(first failure, row "):
            asyncio.run(asyncio.wait_for(prod.produce(1), 60))
    finally:
        prod.close()


def test_a_game_without_a_seed_and_the_old_four_tuple_step(tokenizer):
    run, _ = runner(tokenizer, game_env("support.games:Unseeded"), ["stop"])
    try:
        episode = asyncio.run(run.run({"id": "r"}, 7, 0))
        with pytest.raises(EpisodeFailed, match="step raised GameError: step returned 'not a tuple'"):
            bad, _ = runner(tokenizer, game_env("support.games:BrokenGame", fail="garbage"), ["4"])
            try:
                asyncio.run(bad.run({"id": "r"}, 7, 0))
            finally:
                bad.close()
    finally:
        run.close()
    assert episode.env_reward == 1.0 and episode.turns == 1


def game_config(**environment) -> dict:
    return {
        "model": {"name_or_path": "tiny-arithmetic"},
        "task": {"name": "arithmetic", "max_operand": 9, "num_eval": 4},
        "rollout": {"num_unique_prompts_rollout": 2, "num_samples_per_prompt_rollout": 4, "response_length": 24},
        "environment": {"name": "text_game", "backend": GAME, "max_turns": 3, "max_tokens_per_turn": 4,
                        **environment},
        "renderer": {"name": "tiny-chat"},
        "scoring": {"row_verifiers": False},  # the game gives the reward; a cut turn costs 1
        "verifiers": {"non_stop_penalty": {"all_rows": True}},
        "data": {"max_prompt_token_length": 24}, "algorithm": {"pack_length": 256},
        "train": {"total_steps": 2, "local_eval_every": 0},
        "logging": {"progress": False},
    }


def test_two_training_steps_on_the_game_with_the_shipped_model(tmp_path):
    result = grpo_run.train(game_config(), output_dir=tmp_path / "run")
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines if "env/episodes" in x] == [1, 2]
    for x in lines:
        if "env/episodes" in x:
            assert x["env/episodes"] == 8 and x["env/error_rate"] == 0 and 1 <= x["env/turns_mean"] <= 3
    assert result.checkpoint is not None or result.metrics


def test_config_mistakes_name_their_key(tmp_path, capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "textarena" else real(name, *a))
    for backend, expected in [("textarena", 'environment.backend: backend "textarena" needs the textarena package, '
                                            'which is not installed: pip install "grpo-run[games]"'),
                              ("tetxarena", "environment.backend: must be one of 'gem', 'textarena'")]:
        cfg = tmp_path / "game.toml"
        cfg.write_text(f'[model]\nname_or_path = "tiny-arithmetic"\n[task]\nname = "arithmetic"\n'
                       f'[environment]\nname = "text_game"\nbackend = "{backend}"\nenv_id = "GuessTheNumber-v0"\n'
                       f'[renderer]\nname = "tiny-chat"\n[scoring]\nrow_verifiers = false\n'
                       f'[verifiers.non_stop_penalty]\nall_rows = true\n')
        assert main(["check", str(cfg)]) == 2
        err = capsys.readouterr().err
        assert expected in err and "Traceback" not in err


def test_a_game_module_that_cannot_be_imported_is_one_clear_error(tmp_path):
    with pytest.raises(grpo_run.UserError, match=r"^environment 'text_game': cannot import 'no_such_games' "):
        grpo_run.train(game_config(backend="no_such_games:Game"), output_dir=tmp_path / "run")
