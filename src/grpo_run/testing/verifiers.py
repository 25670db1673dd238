"""``check_verifier``: a verifier keeps the promises the scorer relies on.

The scorer runs sync verifiers in ``spawn`` worker processes it kills on a timeout, and async ones
on its own event loop, cancelling an overrunning call. The check drives a verifier through exactly
that machinery -- the real :class:`~grpo_run.core.scoring.scorer.RewardScorer` -- and compares
what comes back with the same cases scored in this process (:mod:`.verifier_runs`).
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any

from grpo_run.testing._common import Reporter, check_class, default_config, run_sync, short
from grpo_run.testing.verifier_runs import (
    Case,
    Sleeper,
    check_cancellation,
    dataset_row,
    rescale_here,
    score_here,
    show,
    through_scorer,
    verdict,
)

__all__ = ["Case", "Sleeper", "check_verifier"]

EXPECTED_TOLERANCE = 1e-9
"""How far an in-process score may be from the ``expected`` one given to the check."""


def check_verifier(
    cls: type,
    config: Any = None,
    cases: Sequence[Case] = (),
    *,
    expected: Sequence[float | None] | None = None,
    slow_case: Case | None = None,
    timeout_s: float = 2.0,
) -> None:
    """Check a verifier class against the scorer's contract; :class:`AssertionError` if it breaks it.

    :param config: an instance of ``cls.Config`` (default ``cls.Config()``).
    :param cases: a few ``(completion, ground_truth, row)`` calls, ideally with different scores.
        Each row is scored as the dataset row the scorer would pass: with ``ground_truth``,
        ``verifier`` (the verifier's name) and ``id`` (``case-<i>`` unless the row has one) set.
    :param expected: the score of each case (``None``: not applicable), checked in-process to
        within :data:`EXPECTED_TOLERANCE`.
    :param slow_case: a call of this verifier that runs longer than ``timeout_s`` (a program
        that loops forever, a judge that hangs): the timeout step then kills the verifier in the
        middle of its own work instead of the kit's sleeper's.
    :param timeout_s: the scorer's per-call time limit. Every case must finish within it in a
        fresh worker process; the timeout step waits this long once.

    Checks, in order, each failure naming the check and the offending case or value:

    1. **contract**: ``name``, an attrs ``Config``, ``score`` or ``score_batch``; a consistent
       score range, weight and mode (the scorer's own reading of them).
    2. **result**: every case, scored in this process (``score_batch`` when the verifier has it,
       awaited when it is ``async def``), gives a :class:`~grpo_run.VerifierResult` or a float;
       an applicable score is finite and inside the declared score range
       (:class:`~grpo_run.DeclaresScoreRange` on the config, else the class, else ``[0, 1]``);
       metrics are numbers; and it matches ``expected``. A config that rescales
       (:class:`~grpo_run.RescalesScores`) has its raw scores checked against ``[-1e6, 1e6]`` and
       passed, all cases in one call, through a fresh rescaler; the rescaled scores are checked.
    3. **pickle** (sync verifiers): ``(cls, config)`` survives a pickle round trip, as it must to
       reach a worker process.
    4. **scorer**: a ``RewardScorer`` with one worker (``num_workers=1``) scores every case
       without error and gives exactly the in-process scores (applicability included); a
       rescaler's state is set back to a fresh one's before each scorer call of this step and the next.
    5. **timeout**: the same scorer then gets a call that overruns ``timeout_s``: ``slow_case``
       if given, else a call of the kit's :class:`Sleeper` (enabled next to the verifier, so the
       one worker builds both). The call must come back as timed out, which for a sync verifier
       means the worker was killed mid-call; the cases that follow in the same batch run in a
       fresh worker, which must build the verifier again from its pickled spec and give the
       same scores. A verifier that leaves state behind when killed (a lock file, a half-written
       cache, a port it cannot bind again) fails here.
    6. **cancellation** (async verifiers, no ``slow_case``): each case's ``score`` is started on
       one instance and cancelled at its first ``await``; it must raise ``CancelledError`` (not
       swallow it, not turn it into another error), and the same instance must then score every
       case as before. With a ``slow_case`` the scorer's own cancellation (step 5) is used.
    """
    from grpo_run.core.scoring.policy import verifier_policy

    report = Reporter("verifier", cls)
    check_class(cls, "verifier", report)
    config = default_config(cls, config, report)
    if not cases:
        raise report.fail("cases", "give at least one (completion, ground_truth, row) case")
    if expected is not None and len(expected) != len(cases):
        raise report.fail("cases", f"{len(expected)} expected scores for {len(cases)} cases")
    try:
        policy = verifier_policy(report.component, cls, config)
    except ValueError as exc:
        raise report.fail("contract", str(exc)) from None
    rows = [dataset_row(case, i, report.component) for i, case in enumerate(cases)]
    calls = [(completion, row["ground_truth"], row) for (completion, _, _), row in zip(cases, rows, strict=True)]
    results = score_here(cls, config, calls, report)
    if policy.rescaled:
        results = rescale_here(config, results, policy.returned_range, report)
    verdicts = [verdict(i, r, policy.score_range, report) for i, r in enumerate(results)]
    if expected is not None:
        for i, (got, want) in enumerate(zip(verdicts, expected, strict=True)):
            if (got is None) != (want is None) or (got is not None and abs(got - want) > EXPECTED_TOLERANCE):
                raise report.fail("result", f"case {i} ({short(cases[i][0])}): scored {show(got)}, "
                                            f"expected {show(want)}")
    if not policy.is_async:
        _check_pickle(cls, config, report)
    elif slow_case is None:
        run_sync(check_cancellation(cls, config, calls, verdicts, report))
    run_sync(through_scorer(cls, config, rows, [c[0] for c in cases], verdicts, slow_case, timeout_s, report))


def _check_pickle(cls: type, config: Any, report: Reporter) -> None:
    try:
        back_cls, back_config = pickle.loads(pickle.dumps((cls, config)))
    except Exception as exc:
        raise report.fail(
            "pickle", f"the class and its config must pickle to reach worker processes (define them at module "
                      f"level, keep the config plain data): {type(exc).__name__}: {exc}") from exc
    if back_cls is not cls or back_config != config:
        raise report.fail("pickle", f"the pickle round trip changed the spec: {short(back_config)} != {short(config)}")
