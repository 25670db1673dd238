"""The ``text_game`` backends over the real packages (``grpo-run[games]``; skipped where one is
not installed): a seeded game is the same game, moves reach it unchanged, its reward ends the
episode, and an unknown id is a config error naming ``environment.env_id``."""

from __future__ import annotations

import pytest

from grpo_run import Action, ParsedTurn
from grpo_run.cli.main import main
from grpo_run.plugins.environments.text_game import TextGameConfig, TextGameEnvironment


def move(text: str, turn: int = 0) -> Action:
    return Action(ParsedTurn(text), "stop", turn)


def test_textarena_guess_the_number_is_seeded_and_rewards_the_right_guess():
    pytest.importorskip("textarena")
    env = TextGameEnvironment(TextGameConfig(backend="textarena", env_id="GuessTheNumber-v0-train"), {})
    a, b = env.reset({}, 3), env.reset({}, 3)
    assert a.messages == b.messages and "Guess The Number" in a.messages[0]["content"]
    secret = a.state.game.env.game_number
    assert secret == b.state.game.env.game_number  # the group's seed gives one game
    wrong = 1 if secret != 1 else 2
    step = env.step(a.state, move(f"[{wrong}]"))
    assert not step.done and step.reward == 0.0
    assert ("higher" if wrong < secret else "lower") in step.messages[0]["content"]
    step = env.step(a.state, move(f"I say [{secret}]", 1))
    assert step.done and step.reward == 1.0
    env.close(a.state)
    env.close(b.state)


def test_skyrl_gym_builds_its_episode_from_the_row():
    pytest.importorskip("skyrl_gym")
    env = TextGameEnvironment(TextGameConfig(backend="skyrl_gym", env_id="gsm8k_multi_turn"), {})
    reset = env.reset({"prompt": "What is 1+2?", "ground_truth": "3", "extras": {"max_turns": 2}}, 0)
    assert reset.messages == [{"role": "user", "content": "What is 1+2?"}]
    first = env.step(reset.state, move("#### 4"))
    assert not first.done and first.reward == pytest.approx(0.1) and "#### ANSWER" in first.messages[0]["content"]
    last = env.step(reset.state, move("#### 3", 1))
    assert last.done and last.reward == 1.0


@pytest.mark.parametrize(("backend", "env_id", "expected"), [
    ("textarena", "GuessTheNumbr-v0", "environment.env_id: no textarena game named 'GuessTheNumbr-v0' "
                                      "(did you mean 'GuessTheNumber-v0'"),
    ("skyrl_gym", "gsm9k", "environment.env_id: no skyrl_gym game named 'gsm9k' (did you mean 'gsm8k'"),
])
def test_an_unknown_game_id_is_a_config_error(tmp_path, capsys, backend, env_id, expected):
    pytest.importorskip(backend)
    cfg = tmp_path / "game.toml"
    cfg.write_text(f'[model]\nname_or_path = "tiny-arithmetic"\n[task]\nname = "arithmetic"\n'
                   f'[environment]\nname = "text_game"\nbackend = "{backend}"\nenv_id = "{env_id}"\n'
                   f'[renderer]\nname = "tiny-chat"\n[scoring]\nrow_verifiers = false\n'
                   f'[verifiers.non_stop_penalty]\nall_rows = true\n')
    assert main(["check", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err
