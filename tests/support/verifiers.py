"""Verifiers named by import path (``support.verifiers:LengthReward``) in whole-run tests: they
give a randomly initialised model a reward that varies between samples from the first step on.
Module level, so worker processes can import them."""

from __future__ import annotations

from grpo_run import NoConfig


class LengthReward:
    """Reward = completion length / 5, capped at 1."""

    name = "length-reward"
    Config = NoConfig

    def __init__(self, config: NoConfig) -> None:
        self.config = config

    def score(self, completion: str, ground_truth: object, row: object) -> float:
        return min(1.0, len(completion) / 5)


class DigitShare:
    """Reward = the share of digits in the completion."""

    name = "digit-share"
    Config = NoConfig

    def __init__(self, config: NoConfig) -> None:
        self.config = config

    def score(self, completion: str, ground_truth: object, row: object) -> float:
        return sum(c.isdigit() for c in completion) / max(1, len(completion))


LENGTH_REWARD = f"{__name__}:LengthReward"
DIGIT_SHARE = f"{__name__}:DigitShare"
