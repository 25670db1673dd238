"""The ``text_game`` environment: a gym-style text game from another package, unchanged.

``reset`` makes the episode's game and seeds it with the group's seed (the G episodes of a group
start from the same state); its observation is the opening ``user`` message (after
``system_prompt``, when set). Each assistant turn's text is the game's move; the game's
observation comes back as the next ``user`` message with the move's reward, and the episode ends
when the game says it is terminated or truncated. The rows of the prompt source only pace the run
(one group per row) unless the backend builds its episodes from them (``skyrl_gym``).
Backends and whether each takes the seed: :mod:`grpo_run.plugins.environments.game_backends`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import attrs

from grpo_run import Action, EnvReset, EnvStep, Tool
from grpo_run.plugins.environments.game_backends import BACKENDS, game_factory, known_ids, missing_backend

_IMPORT_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def _check_backend(instance: Any, attribute: Any, value: str) -> None:
    if value not in BACKENDS and not _IMPORT_PATH.match(value):
        raise ValueError(f"must be one of {', '.join(repr(b) for b in BACKENDS)} or an import path "
                         f'"module:attr" (got {value!r})')
    why = missing_backend(value)
    if why:
        raise ValueError(why)


def _check_env_id(instance: Any, attribute: Any, value: str) -> None:
    backend = instance.backend
    if backend not in BACKENDS or missing_backend(backend):
        return  # an import path takes any id (or none); a missing package is reported on `backend`
    if not value:
        raise ValueError(f'backend "{backend}" needs an env_id (a game its registry holds)')
    ids = known_ids(backend)
    if ids is not None and value not in ids:
        import difflib

        close = difflib.get_close_matches(value, ids, n=3)
        hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else f"; e.g. {', '.join(ids[:5])}"
        raise ValueError(f"no {backend} game named {value!r}{hint}")


@attrs.frozen
class TextGameConfig:
    """Options of the ``text_game`` environment."""

    backend: str = attrs.field(validator=_check_backend)
    """``"gem"``, ``"textarena"``, ``"skyrl_gym"``, ``"openenv"``, or ``"module:attr"``: a
    factory called with ``env_args`` (and ``env_id=`` when set) that returns a game with
    ``reset(seed=...)`` and ``step(text)``."""
    env_id: str = attrs.field(default="", validator=_check_env_id)
    """The game's id in the backend's registry."""
    env_args: dict[str, Any] = attrs.Factory(dict)
    """Keyword arguments of the game's constructor."""
    system_prompt: str = ""
    """A system message before the game's first observation (empty: none)."""


@attrs.define
class GameState:
    """One episode's game and what it said so far."""

    game: Any
    moves: int = 0


class TextGameEnvironment:
    """Plays one text game per episode: its observations are user turns, the model's turns its moves."""

    name = "text_game"
    Config = TextGameConfig

    def __init__(self, config: TextGameConfig, tools: Mapping[str, Tool]) -> None:
        self.config = config
        self.make_game = game_factory(config.backend, config.env_id, config.env_args)

    def reset(self, row: Mapping[str, Any], seed: int) -> EnvReset:
        game = self.make_game()
        observation = game.reset(seed, row)
        messages = [{"role": "user", "content": observation}]
        if self.config.system_prompt:
            messages.insert(0, {"role": "system", "content": self.config.system_prompt})
        return EnvReset(messages, (), GameState(game))

    def step(self, state: GameState, action: Action) -> EnvStep:
        state.moves += 1
        out = state.game.step(action.turn.text)
        done = out.terminated or out.truncated
        messages = [] if done else [{"role": "user", "content": out.observation}]
        metrics = {"game_truncated": float(out.truncated)} if done else {}
        return EnvStep(messages, out.reward, done, metrics)

    def close(self, state: GameState | None) -> None:
        if state is not None:
            state.game.close()
