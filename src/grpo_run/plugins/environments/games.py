"""Two small offline games the shipped char model can play: ``guess-a-digit`` and ``counter``.

Both read only digits and short words, so their episodes fit the ``tiny-chat`` format
(``<|user|>higher<|assistant|>7<|eos|>``); their rewards come from the environment, so a run
needs no verifier beyond the row's (the row's own text is not used).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from grpo_run import Action, EnvReset, EnvStep, Tool


@attrs.frozen
class GuessConfig:
    """Options of ``guess-a-digit``."""

    prompt: str = "guess"
    """The opening user message."""
    digits: int = attrs.field(default=10, validator=[attrs.validators.ge(2), attrs.validators.le(10)])
    """The secret is ``seed % digits``: one of ``0`` .. ``digits - 1``."""
    turn_penalty: float = attrs.field(default=0.25, validator=[attrs.validators.ge(0.0), attrs.validators.lt(1.0)])
    """Reward lost per extra turn: finding the digit at turn ``t`` (0-based) earns
    ``max(0, 1 - turn_penalty * t)``; never finding it earns 0."""
    first_digit: bool = False
    """Read a turn's first character as the guess when it is a digit (the rest of the turn is
    ignored). The shipped char model answers ``guess`` with two digits (``43``): with this on it
    can play from its first step; off, a turn must be exactly one digit."""


class GuessDigit:
    """Guess a secret digit; each wrong guess is answered ``higher`` or ``lower``.

    The secret is ``seed % digits`` (10): the G episodes of a group (same seed) chase the same
    digit. A turn that is not one digit is answered ``one digit`` and counts as a turn. Metrics:
    ``found``."""

    name = "guess-a-digit"
    Config = GuessConfig

    def __init__(self, config: GuessConfig, tools: Mapping[str, Tool]) -> None:
        self.config = config

    def reset(self, row: Mapping[str, Any], seed: int) -> EnvReset:
        return EnvReset([{"role": "user", "content": self.config.prompt}], [], {"secret": seed % self.config.digits})

    def step(self, state: dict[str, int], action: Action) -> EnvStep:
        guess = action.turn.text.strip()
        if self.config.first_digit:
            guess = guess[:1]
        if len(guess) != 1 or not guess.isdigit():
            return EnvStep([{"role": "user", "content": "one digit"}], 0.0, False, {"found": 0.0})
        if int(guess) == state["secret"]:
            return EnvStep((), max(0.0, 1.0 - self.config.turn_penalty * action.turn_index), True, {"found": 1.0})
        hint = "higher" if int(guess) < state["secret"] else "lower"
        return EnvStep([{"role": "user", "content": hint}], 0.0, False, {"found": 0.0})


@attrs.frozen
class CounterConfig:
    """Options of ``counter``."""

    top: int = attrs.field(default=40, validator=attrs.validators.ge(1))
    """The starting number is ``seed % top``."""
    reward_per_answer: float = attrs.field(default=0.25, validator=attrs.validators.gt(0.0))
    """Reward of each right answer (0.25: four right answers make 1)."""


class Counter:
    """Count up by one: the environment says a number, the model answers the next one, the
    environment says the one after, and so on. Each right answer earns ``reward_per_answer``; a
    wrong one ends the episode. Metrics: ``right``."""

    name = "counter"
    Config = CounterConfig

    def __init__(self, config: CounterConfig, tools: Mapping[str, Tool]) -> None:
        self.config = config

    def reset(self, row: Mapping[str, Any], seed: int) -> EnvReset:
        start = seed % self.config.top
        return EnvReset([{"role": "user", "content": str(start)}], [], {"next": start + 1})

    def step(self, state: dict[str, int], action: Action) -> EnvStep:
        if action.turn.text.strip() != str(state["next"]):
            return EnvStep((), 0.0, True, {"right": 0.0})
        state["next"] += 2  # the model said n + 1; the environment says n + 2 and expects n + 3
        return EnvStep([{"role": "user", "content": str(state["next"] - 1)}], self.config.reward_per_answer, False, {"right": 1.0})
