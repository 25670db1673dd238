"""Adapters from gym-style text-game packages to one small interface, :class:`Game`.

A :class:`Game` is one episode's game: ``reset(seed, row)`` gives the opening observation text,
``step(text)`` a :class:`GameStep`. Each backend below wraps one package's own API unchanged; an
import path (``"module:attr"``) names a factory that returns an object with gym-style
``reset(seed=...)`` / ``step(text)`` (gymnasium's 5-tuple or the older 4-tuple).

Whether the group's shared seed reaches the game:
- ``gem``: ``reset(seed=...)``: yes.
- ``textarena``: ``reset(num_players=1, seed=...)``: yes; its games draw from the global
  ``random`` module, so resets are serialised by a lock (episodes run on several threads).
- ``skyrl_gym``: no seed; the episode is built from the row (``init(prompt)`` and the row as
  ``extras``), which the group shares.
- import path: ``reset(seed=...)`` when the method takes a ``seed`` argument, else ``reset()``.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import threading
from collections.abc import Callable, Mapping
from typing import Any

import attrs

BACKENDS = {
    # backend -> (module to import, the pip line that installs it)
    "gem": ("gem", 'pip install gem-llm==0.1.0  (it pins nltk==3.9.1 and reasoning-gym==0.1.23, which '
                   "conflict with grpo-run's tested set)"),
    "textarena": ("textarena", 'pip install "grpo-run[games]"'),
    "skyrl_gym": ("skyrl_gym", 'pip install "grpo-run[games]"'),
    "openenv": ("openenv", "pip install openenv-core"),
}


@attrs.frozen
class GameStep:
    """A game's answer to one move."""

    observation: str
    reward: float
    terminated: bool
    truncated: bool


class GameError(ValueError):
    """A game returned something that is not a valid answer (the episode is dropped)."""


def missing_backend(backend: str) -> str | None:
    """Why ``backend`` cannot be used here (its package is missing), or ``None``."""
    if backend not in BACKENDS:
        return None
    module, pip = BACKENDS[backend]
    if importlib.util.find_spec(module) is None:
        return f'backend "{backend}" needs the {module} package, which is not installed: {pip}'
    return None


def known_ids(backend: str) -> list[str] | None:
    """The environment ids ``backend``'s registry holds (``None``: not checkable)."""
    if backend == "textarena":
        from textarena.envs.registration import ENV_REGISTRY
        return sorted(ENV_REGISTRY)
    if backend == "skyrl_gym":
        import skyrl_gym
        return sorted(skyrl_gym.registry)
    if backend == "gem":
        from gem.envs.registration import ENV_REGISTRY as GEM_REGISTRY
        return sorted(GEM_REGISTRY)
    return None


def load_factory(path: str) -> Callable[..., Any]:
    """The callable named ``"module:attr"``."""
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import {module_name!r} ({exc})") from None
    try:
        factory = getattr(module, attr)
    except AttributeError:
        raise ValueError(f"module {module_name!r} has no attribute {attr!r}") from None
    if not callable(factory):
        raise ValueError(f"{path!r} is not callable")
    return factory


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise GameError(f"{what} is {value!r:.200}, not text")
    return value


def _gym_step(result: Any) -> GameStep:
    """A gymnasium 5-tuple ``(obs, reward, terminated, truncated, info)`` or a 4-tuple
    ``(obs, reward, done, info)`` / ``(obs, reward, terminated, truncated)``."""
    if isinstance(result, tuple) and len(result) == 5:
        obs, reward, terminated, truncated, _ = result
    elif isinstance(result, tuple) and len(result) == 4 and isinstance(result[3], Mapping):
        obs, reward, terminated, _ = result
        truncated = False
    elif isinstance(result, tuple) and len(result) == 4:
        obs, reward, terminated, truncated = result
    else:
        raise GameError(f"step returned {result!r:.200}, not (observation, reward, terminated, truncated, info)")
    if isinstance(reward, bool) or not isinstance(reward, (int, float)):
        raise GameError(f"step's reward is {reward!r:.100}, not a number")
    return GameStep(_text(obs, "step's observation"), float(reward), bool(terminated), bool(truncated))


class GymGame:
    """A gym-style text game: ``reset(seed=...)`` -> obs or (obs, info); ``step(text)`` -> a tuple."""

    def __init__(self, env: Any, lock: threading.Lock | None = None) -> None:
        self.env = env
        self.lock = lock
        reset = getattr(env, "reset", None)
        if not callable(reset) or not callable(getattr(env, "step", None)):
            raise GameError(f"{type(env).__name__} has no reset()/step() methods")
        try:
            self._seeded = "seed" in inspect.signature(reset).parameters
        except (TypeError, ValueError):
            self._seeded = False

    def reset(self, seed: int, row: Mapping[str, Any]) -> str:
        result = self.env.reset(seed=seed) if self._seeded else self.env.reset()
        if isinstance(result, tuple) and len(result) == 2:
            result = result[0]
        return _text(result, "reset's observation")

    def step(self, text: str) -> GameStep:
        return _gym_step(self.env.step(text))

    def close(self) -> None:
        closer = getattr(self.env, "close", None)
        if callable(closer):
            closer()


_TEXTARENA_LOCK = threading.Lock()


class TextArenaGame:
    """A one-player TextArena game: ``reset(num_players=1, seed)``, ``get_observation()``,
    ``step(text) -> (done, info)`` and the rewards from ``close()`` when the game is done."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.done = False

    def reset(self, seed: int, row: Mapping[str, Any]) -> str:
        with _TEXTARENA_LOCK:  # its games draw from the global `random`, seeded by reset
            self.env.reset(num_players=1, seed=seed)
            _, observation = self.env.get_observation()
        return _text(observation, "the game's observation")

    def step(self, text: str) -> GameStep:
        done, _ = self.env.step(text)
        if not done:
            _, observation = self.env.get_observation()
            return GameStep(_text(observation, "the game's observation"), 0.0, False, False)
        self.done = True
        result = self.env.close()
        rewards = result[0] if isinstance(result, tuple) else result
        reward = (rewards or {}).get(0, 0.0)
        return GameStep("", float(reward), True, False)

    def close(self) -> None:
        if not self.done:
            self.env.close()


class SkyRLGame:
    """A SkyRL-Gym text environment: built per episode from the row (``extras``), opened with
    ``init(prompt messages)``, each ``step(text)`` a dict of observations, reward and done."""

    def __init__(self, make: Callable[[Mapping[str, Any]], Any]) -> None:
        self.make = make
        self.env: Any = None

    def reset(self, seed: int, row: Mapping[str, Any]) -> str:
        self.env = self.make(row)
        prompt = [dict(m) for m in row["messages"]] if "messages" in row else [{"role": "user", "content": row["prompt"]}]
        messages, _ = self.env.init(prompt)
        return "\n".join(_text(m.get("content"), "init's message") for m in messages if m.get("role") != "system")

    def step(self, text: str) -> GameStep:
        out = self.env.step(text)
        if not isinstance(out, Mapping) or "reward" not in out or "done" not in out:
            raise GameError(f"step returned {out!r:.200}, not a BaseTextEnvStepOutput")
        observation = "\n".join(_text(m.get("content"), "an observation") for m in out.get("observations") or [])
        return GameStep(observation, float(out["reward"] or 0.0), bool(out["done"]), False)

    def close(self) -> None:
        if self.env is not None:
            self.env.close()


def game_factory(backend: str, env_id: str, env_args: Mapping[str, Any]) -> Callable[[], Any]:
    """A function that makes one episode's :class:`Game`."""
    args = dict(env_args)
    if backend == "textarena":
        import textarena

        return lambda: TextArenaGame(textarena.make(env_id, **args))
    if backend == "gem":
        import gem

        return lambda: GymGame(gem.make(env_id, **args))
    if backend == "skyrl_gym":
        import skyrl_gym

        def skyrl(row: Mapping[str, Any]) -> Any:
            extras = {"reward_spec": {"ground_truth": row.get("ground_truth")}, **dict(row.get("extras") or {})}
            return skyrl_gym.make(env_id, env_config=args, extras=extras)

        return lambda: SkyRLGame(skyrl)
    if backend == "openenv":
        raise ValueError('backend "openenv" is not supported: its environments run as HTTP servers '
                         '(usually in Docker); wrap a client in a factory and name it as backend = "module:attr"')
    factory = load_factory(backend)
    if env_id:
        args = {"env_id": env_id, **args}
    return lambda: GymGame(factory(**args))
