"""Tiny gym-style text games for the ``text_game`` environment's tests, named by import path
(``backend = "support.games:GuessDigit"``). Their text uses only characters the shipped char
model knows."""

from __future__ import annotations

import random
import re
from typing import Any


class GuessDigit:
    """Guess a secret digit 0-9 with higher/lower feedback (gymnasium's API). Reward 1 for the
    right digit; ``max_guesses`` wrong ones end the game (truncated). The secret is one of
    ``0`` .. ``digits - 1``."""

    def __init__(self, max_guesses: int = 3, digits: int = 10) -> None:
        self.max_guesses = max_guesses
        self.digits = digits
        self.secret = -1
        self.guesses = 0
        self.closed = False

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        self.secret = random.Random(seed).randrange(self.digits)
        self.guesses = 0
        return "Guess a digit.", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.guesses += 1
        match = re.search(r"\d", action)
        if match is None:
            text = "Say a digit."
        elif int(match.group()) == self.secret:
            return "Right.", 1.0, True, False, {}
        else:
            text = "Higher." if int(match.group()) < self.secret else "Lower."
        return text, 0.0, False, self.guesses >= self.max_guesses, {}

    def close(self) -> None:
        self.closed = True


class BrokenGame(GuessDigit):
    """``fail = "raise"``: step raises; ``"garbage"``: step returns a string."""

    def __init__(self, fail: str = "raise") -> None:
        super().__init__()
        self.fail = fail

    def step(self, action: str) -> Any:
        if self.fail == "raise":
            raise RuntimeError("the game broke")
        return "not a tuple"


class Unseeded:
    """A game whose ``reset`` takes no seed (old gym API: 4-tuple steps)."""

    def reset(self) -> str:
        return "Say stop."

    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        return "Done.", float("stop" in action), True, {}
