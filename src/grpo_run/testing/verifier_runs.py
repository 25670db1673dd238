"""How ``check_verifier`` runs a verifier: in this process, cancelled, and through the scorer."""

from __future__ import annotations

import asyncio
import inspect
import math
import numbers
import time
from collections.abc import Mapping, Sequence
from typing import Any

from grpo_run.core.plugins.abilities import AsyncClosable, BatchVerifier
from grpo_run.core.plugins.types import NoConfig, VerifierResult
from grpo_run.testing._common import Reporter, run_sync, short

Case = tuple[str, Any, Mapping[str, Any]]
"""``(completion, ground_truth, row)``: one call of ``score``."""


class Sleeper:
    """The kit's own verifier whose every call outlasts any time limit: the scorer must kill the
    worker it runs in (it is enabled next to the verifier under test, see :func:`check_verifier`)."""

    name = "grpo-run-testing-sleeper"
    Config = NoConfig

    def __init__(self, config: NoConfig) -> None:
        self.config = config

    def score(self, completion: str, ground_truth: Any, row: Mapping[str, Any]) -> float:
        time.sleep(3600)
        return 0.0


def dataset_row(case: Case, index: int, name: str) -> dict[str, Any]:
    """The row the scorer gets for a case: the case's row with its ground truth and verifier name."""
    completion, ground_truth, row = case
    return {"id": f"case-{index}", **row, "ground_truth": ground_truth, "verifier": name}


def score_here(cls: type, config: Any, calls: list[Case], report: Reporter) -> list[Any]:
    """Score ``calls`` on one fresh instance in this process (on a fresh loop when async)."""

    async def score_async() -> list[Any]:
        verifier = _build(cls, config, report)
        try:
            return await _call_all(verifier, calls, report)
        finally:
            if isinstance(verifier, AsyncClosable):
                await verifier.aclose()

    if _is_async(cls):
        return run_sync(score_async())
    verifier = _build(cls, config, report)
    batched = isinstance(verifier, BatchVerifier)
    try:
        results = verifier.score_batch(list(calls)) if batched else [verifier.score(*call) for call in calls]
    except Exception as exc:
        raise report.fail("result", f"scoring the cases in this process raised {type(exc).__name__}: {exc}") from exc
    return _batch_list(results, len(calls), report)


def rescale_here(config: Any, results: list[Any], raw_range: tuple[float, float], report: Reporter) -> list[Any]:
    """``results`` with their applicable raw scores passed, in one call, through a fresh rescaler
    (:class:`~grpo_run.RescalesScores`), as the scorer passes one scoring call's."""
    raw = [(i, verdict(i, r, raw_range, report)) for i, r in enumerate(results)]
    picked = [(i, score) for i, score in raw if score is not None]
    try:
        scores = list(config.rescaler().rescale([score for _, score in picked], True))
    except Exception as exc:
        raise report.fail("result", f"rescaling the raw scores raised {type(exc).__name__}: {exc}") from exc
    if len(scores) != len(picked):
        raise report.fail("result", f"the rescaler returned {len(scores)} scores for {len(picked)} raw scores")
    out = list(results)
    for (i, _), score in zip(picked, scores, strict=True):
        out[i] = VerifierResult(score) if not isinstance(out[i], VerifierResult) else VerifierResult(
            score, applicable=True, metrics=out[i].metrics)
    return out


def _build(cls: type, config: Any, report: Reporter) -> Any:
    try:
        return cls(config)
    except Exception as exc:
        raise report.fail("build", f"{cls.__qualname__}(config) raised {type(exc).__name__}: {exc}") from exc


async def _call_all(verifier: Any, calls: list[Case], report: Reporter) -> list[Any]:
    try:
        if isinstance(verifier, BatchVerifier):
            results = await verifier.score_batch(list(calls))
        else:
            results = [await verifier.score(*call) for call in calls]
    except Exception as exc:
        raise report.fail("result", f"scoring the cases in this process raised {type(exc).__name__}: {exc}") from exc
    return _batch_list(results, len(calls), report)


async def _call_one(verifier: Any, call: Case) -> Any:
    if isinstance(verifier, BatchVerifier):
        return (await verifier.score_batch([call]))[0]
    return await verifier.score(*call)


def _is_async(cls: type) -> bool:
    return inspect.iscoroutinefunction(cls.score_batch if isinstance(cls, BatchVerifier) else cls.score)


def _batch_list(results: Any, expected: int, report: Reporter) -> list[Any]:
    """``score_batch``'s results as a list of one per item (a list of ``score`` results passes)."""
    try:
        results = list(results)
    except TypeError:
        raise report.fail("result", f"score_batch returned {short(results)}, expected a list") from None
    if len(results) != expected:
        raise report.fail("result", f"score_batch returned {len(results)} results for {expected} items")
    return results


def verdict(index: int, result: Any, score_range: tuple[float, float], report: Reporter) -> float | None:
    """The applicable score of one result (``None`` when not applicable), or a failure."""
    where = f"case {index}"
    if isinstance(result, VerifierResult):
        score, applicable = result.score, result.applicable
        for key, value in result.metrics.items():
            if not isinstance(value, numbers.Real) or isinstance(value, bool):
                raise report.fail("result", f"{where}: metric {key!r} is {short(value)}, expected a number")
    elif isinstance(result, numbers.Real) and not isinstance(result, bool):
        score, applicable = result, True
    else:
        raise report.fail("result", f"{where}: returned {short(result)}, expected a VerifierResult or a float")
    if not isinstance(applicable, bool):
        raise report.fail("result", f"{where}: applicable is {short(applicable)}, expected a bool")
    if not applicable:
        return None
    low, high = score_range
    if not (isinstance(score, numbers.Real) and math.isfinite(score) and low <= score <= high):
        raise report.fail("score range", f"{where}: score {short(score)} is outside the declared range "
                                         f"[{low:g}, {high:g}]")
    return float(score)


async def check_cancellation(cls: type, config: Any, calls: list[Case], verdicts: list[float | None],
                             report: Reporter) -> None:
    """Cancel each case's call at its first ``await``; then the instance must score as before."""
    verifier = _build(cls, config, report)
    try:
        for i, call in enumerate(calls):
            task = asyncio.ensure_future(_call_one(verifier, call))
            await asyncio.sleep(0)  # the call starts and runs to its first await
            if task.done():
                continue  # finished without awaiting anything: nothing to cancel
            task.cancel()
            try:
                result = await task
            except asyncio.CancelledError:
                continue
            except Exception as exc:
                raise report.fail("cancellation", f"case {i}: cancelled score() raised {type(exc).__name__}: {exc} "
                                                  "instead of letting CancelledError through") from exc
            raise report.fail("cancellation", f"case {i}: cancelled score() swallowed the CancelledError and "
                                              f"returned {short(result)}")
        again = await _call_all(verifier, calls, report)
    finally:
        if isinstance(verifier, AsyncClosable):
            await verifier.aclose()
    for i, result in enumerate(again):
        got = verdict(i, result, (-math.inf, math.inf), report)
        if got != verdicts[i]:
            raise report.fail("cancellation", f"case {i}: after cancelled calls the instance scored {show(got)}, "
                                              f"before {show(verdicts[i])}")


async def through_scorer(cls: type, config: Any, rows: list[dict[str, Any]], completions: list[str],
                         verdicts: list[float | None], slow_case: Case | None, timeout_s: float,
                         report: Reporter) -> None:
    """The scorer and timeout steps of :func:`~grpo_run.testing.check_verifier` (see there)."""
    from grpo_run.core.scoring.scorer import RewardScorer

    name = report.component
    specs: dict[str, tuple[type, Any]] = {name: (cls, config)}
    probe_row: dict[str, Any] | None = None
    if slow_case is not None:
        probe_row, probe_completion = dataset_row(slow_case, len(rows), name), slow_case[0]
    elif not _is_async(cls):
        specs[Sleeper.name] = (Sleeper, NoConfig())
        probe_row, probe_completion = {**rows[0], "id": "sleeper", "verifier": Sleeper.name}, ""
    step = "scorer"
    scorer = RewardScorer(specs, num_workers=1, timeout_s=timeout_s, chunk_size=1)
    fresh = scorer.state_dict()  # rescalers' state: each step below starts from it
    try:
        _compare(step, await scorer.score(rows, completions), verdicts, completions, name, timeout_s, report)
        if probe_row is None:
            return
        step = "timeout"
        scorer.load_state_dict(fresh)
        batch = await scorer.score([probe_row, *rows], [probe_completion, *completions])
        if "timed out" not in (batch[0].error or ""):
            what = "slow_case" if slow_case is not None else "the sleeper's call"
            raise report.fail(step, f"{what} did not time out after {timeout_s:g}s (error: {batch[0].error!r}, "
                                    f"scores {dict(batch[0].scores)})")
        _compare(step, batch[1:], verdicts, completions, name, timeout_s, report)
    except AssertionError:
        raise
    except Exception as exc:
        raise report.fail(step, f"the scorer raised {type(exc).__name__}: {exc}") from exc
    finally:
        await scorer.aclose()


def _compare(step: str, results: Sequence[Any], verdicts: list[float | None], completions: list[str], name: str,
             timeout_s: float, report: Reporter) -> None:
    where = "after the timed-out call" if step == "timeout" else "through the scorer"
    for i, (result, want) in enumerate(zip(results, verdicts, strict=True)):
        if result.error is not None:
            hint = f" (each case must finish within timeout_s={timeout_s:g})" if "timed out" in result.error else ""
            raise report.fail(step, f"case {i} ({short(completions[i])}) failed {where}: {result.error}{hint}")
        got = result.scores.get(name)
        if got != want:
            raise report.fail(step, f"case {i} ({short(completions[i])}) scored {show(got)} {where} "
                                    f"but {show(want)} in this process")


def show(score: float | None) -> str:
    """A score for a message."""
    return "not applicable" if score is None else repr(score)
