"""The verifier check catches each kind of broken verifier, with a message naming the check.

The broken verifiers live at module level: the check spawns scorer workers, which import this
module to unpickle them.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import shutil
import time
from pathlib import Path
from typing import Any, Callable

import attrs
import pytest

from grpo_run import (
    VerifierConfig,
    VerifierResult,
)
from grpo_run.testing import (
    ContractError,
    check_verifier,
)

HAVE_BWRAP = shutil.which("bwrap") is not None
FAST = 0.5
"""Scorer time limit for this module's own (instant) verifiers."""



# =============================================================================================
# Verifiers that break the contract
# =============================================================================================


class TooBig:
    name = "too-big"
    Config = VerifierConfig

    def __init__(self, config: VerifierConfig) -> None:
        self.config = config

    def score(self, completion: str, ground_truth: Any, row: Any) -> float:
        return 2.0


@attrs.frozen
class PenaltyConfig(VerifierConfig):
    score_range: tuple[float, float] = (-1.0, 0.0)


class Penalty(TooBig):
    """-0.5 always: inside its config's declared range, outside the default one."""

    name = "penalty"
    Config = VerifierConfig

    def score(self, completion: str, ground_truth: Any, row: Any) -> VerifierResult:
        return VerifierResult(score=-0.5, metrics={"calls": 1.0})


@attrs.frozen
class HookConfig(VerifierConfig):
    hook: Callable[[str], str] = str.strip


class Hooked(TooBig):
    """Applies the function in its config: fine in-process, but a lambda cannot reach a worker."""

    name = "hooked"
    Config = HookConfig

    def score(self, completion: str, ground_truth: Any, row: Any) -> float:
        return 1.0 if self.config.hook(completion) == "x" else 0.0


class ParentOnly(TooBig):
    """Scores 1 in the process that built the test, 0 in a worker (reads process state)."""

    name = "parent-only"

    def score(self, completion: str, ground_truth: Any, row: Any) -> float:
        return 1.0 if multiprocessing.parent_process() is None else 0.0


@attrs.frozen
class LockConfig(VerifierConfig):
    lock: str = ""


class LockingVerifier:
    """Holds a lock file during each call; refuses to start while one exists. A worker killed in
    the middle of a call leaves the lock behind, so no fresh worker can start: not crash-safe."""

    name = "locking"
    Config = LockConfig

    def __init__(self, config: LockConfig) -> None:
        self.config = config
        if Path(config.lock).exists():
            raise RuntimeError(f"stale lock {config.lock}")

    def score(self, completion: str, ground_truth: Any, row: Any) -> float:
        lock = Path(self.config.lock)
        lock.touch()
        time.sleep(10.0 if completion == "slow" else 0.0)
        lock.unlink()
        return 1.0


class AsyncEcho:
    name = "async-echo"
    Config = VerifierConfig

    def __init__(self, config: VerifierConfig) -> None:
        self.config = config

    async def score(self, completion: str, ground_truth: Any, row: Any) -> float:
        await asyncio.sleep(0.001)
        return 1.0 if completion == ground_truth else 0.0


class BatchLength:
    """Scores whole batches: length / 4, capped at 1."""

    name = "batch-length"
    Config = VerifierConfig
    max_batch_size = 2

    def __init__(self, config: VerifierConfig) -> None:
        self.config = config

    def score_batch(self, items):
        return [min(1.0, len(completion) / 4) for completion, _, _ in items]


class BatchDropsOne(BatchLength):
    name = "batch-drops-one"

    def score_batch(self, items):
        return super().score_batch(items)[:-1]


class AsyncSleepy(AsyncEcho):
    """Waits 10 s on "slow": the scorer must cancel it, and the instance keeps working."""

    name = "async-sleepy"

    async def score(self, completion: str, ground_truth: Any, row: Any) -> float:
        await asyncio.sleep(10.0 if completion == "slow" else 0.001)
        return 1.0 if completion == ground_truth else 0.0


class SwallowsCancel(AsyncEcho):
    name = "swallows-cancel"

    async def score(self, completion: str, ground_truth: Any, row: Any) -> float:
        try:
            await asyncio.sleep(0.001)
        except asyncio.CancelledError:
            return 0.0
        return 1.0


def test_verifier_scoring_outside_its_range_fails() -> None:
    with pytest.raises(AssertionError, match=r"^verifier 'too-big': score range: case 0: score 2\.0 is outside the "
                                             r"declared range \[0, 1\]$"):
        check_verifier(TooBig, None, [("x", None, {})])


def test_verifier_score_range_comes_from_the_config() -> None:
    check_verifier(Penalty, PenaltyConfig(), [("x", None, {})], expected=[-0.5], timeout_s=FAST)
    with pytest.raises(AssertionError, match=r"'penalty': score range: case 0: score -0\.5 is outside the declared"):
        check_verifier(Penalty, None, [("x", None, {})])


def test_verifier_not_matching_expected_fails() -> None:
    with pytest.raises(AssertionError, match=r"'async-echo': result: case 1 \('b'\): scored 0\.0, expected 1\.0$"):
        check_verifier(AsyncEcho, None, [("a", "a", {}), ("b", "c", {})], expected=[1.0, 1.0])


def test_verifier_with_unpicklable_config_fails() -> None:
    check_verifier(Hooked, HookConfig(), [(" x ", None, {})], expected=[1.0], timeout_s=FAST)
    with pytest.raises(AssertionError, match=r"^verifier 'hooked': pickle: the class and its config must pickle to "
                                             r"reach worker processes .*: AttributeError: Can't pickle local object"):
        check_verifier(Hooked, HookConfig(hook=lambda s: s.strip()), [(" x ", None, {})])


def test_verifier_scoring_differently_in_a_worker_fails() -> None:
    with pytest.raises(AssertionError, match=r"^verifier 'parent-only': scorer: case 0 \('x'\) scored 0\.0 through "
                                             r"the scorer but 1\.0 in this process$"):
        check_verifier(ParentOnly, None, [("x", None, {})], timeout_s=FAST)


def test_verifier_that_cannot_restart_after_a_kill_fails(tmp_path: Path) -> None:
    config = LockConfig(lock=str(tmp_path / "lock"))
    with pytest.raises(AssertionError, match=r"^verifier 'locking': timeout: the scorer raised RunError: a scoring "
                                             r"worker could not start its verifiers: RuntimeError: stale lock"):
        check_verifier(LockingVerifier, config, [("x", None, {})], slow_case=("slow", None, {}), timeout_s=FAST)


def test_verifier_slow_case_that_is_not_slow_fails(tmp_path: Path) -> None:
    config = LockConfig(lock=str(tmp_path / "lock"))
    with pytest.raises(AssertionError, match=r"^verifier 'locking': timeout: slow_case did not time out after 0\.5s"):
        check_verifier(LockingVerifier, config, [("x", None, {})], slow_case=("fast", None, {}), timeout_s=FAST)


def test_async_verifier_passes_and_one_swallowing_cancellation_fails() -> None:
    check_verifier(AsyncEcho, None, [("a", "a", {}), ("b", "c", {})], expected=[1.0, 0.0], timeout_s=FAST)
    with pytest.raises(AssertionError, match=r"^verifier 'swallows-cancel': cancellation: case 0: cancelled score\(\) "
                                             r"swallowed the CancelledError and returned 0\.0$"):
        check_verifier(SwallowsCancel, None, [("a", "a", {})], timeout_s=FAST)


def test_async_verifier_cancelled_by_the_scorer_on_its_slow_case() -> None:
    start = time.monotonic()
    check_verifier(AsyncSleepy, None, [("a", "a", {})], slow_case=("slow", "a", {}), timeout_s=FAST)
    assert time.monotonic() - start < 5.0  # cancelled at 0.5 s, not waited out


def test_batch_verifiers() -> None:
    cases = [("ab", None, {}), ("abcdef", None, {}), ("", None, {})]
    check_verifier(BatchLength, None, cases, expected=[0.5, 1.0, 0.0], timeout_s=FAST)
    with pytest.raises(AssertionError, match=r"^verifier 'batch-drops-one': result: score_batch returned 2 results "
                                             r"for 3 items$"):
        check_verifier(BatchDropsOne, None, cases)


def test_verifier_returning_the_wrong_type_fails() -> None:
    class Wordy(TooBig):
        name = "wordy"

        def score(self, completion: str, ground_truth: Any, row: Any) -> Any:
            return "yes"

    with pytest.raises(AssertionError, match=r"^verifier 'wordy': result: case 0: returned 'yes', expected a "
                                             r"VerifierResult or a float$"):
        check_verifier(Wordy, None, [("x", None, {})])


def test_contract_error_carries_its_parts() -> None:
    with pytest.raises(ContractError) as info:
        check_verifier(TooBig, None, [("x", None, {})])
    assert (info.value.family, info.value.component, info.value.check) == ("verifier", "too-big", "score range")
    assert info.value.detail == "case 0: score 2.0 is outside the declared range [0, 1]"


