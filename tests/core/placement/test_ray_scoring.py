"""Scoring workers in Ray actors (``distributed.scoring_actors``), on a local Ray instance (``heavy``).

* The actors' worker processes score exactly like the driver's own workers, and they are not
  processes of the driver.
* A call that overruns its time limit is killed on the actor's node and counted as a timeout; the
  actor goes on scoring.
* An actor that dies fails the next scoring call with an error naming it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import signal

import psutil
import pytest

from support import faulty_verifiers as faulty
from support.paths import REPO

from grpo_run import NoConfig
from grpo_run.core.config.processes import ActorResources
from grpo_run.core.errors import RunError
from grpo_run.core.scoring.scorer import RewardScorer
from grpo_run.plugins.verifiers.math import MathVerifier

pytestmark = [pytest.mark.heavy]
ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def local_ray():
    # Ray's workers (and the scoring processes they start) import the test verifiers from tests/.
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "tests"), before]))
    ray.init(num_cpus=4, include_dashboard=False, logging_level=logging.WARNING)
    yield
    ray.shutdown()
    if before is None:
        os.environ.pop("PYTHONPATH")
    else:
        os.environ["PYTHONPATH"] = before


def scorer(verifiers, *, actors: int = 0, timeout_s: float = 5.0) -> RewardScorer:
    pool = functools.partial(
        _pool(), num_actors=actors, resources=ActorResources(num_cpus=1), startup_timeout_s=120,
    ) if actors else None
    return RewardScorer(verifiers, num_workers=1, timeout_s=timeout_s, default_verifier=next(iter(verifiers)),
                        sync_pool=pool)


def _pool():
    from grpo_run.core.placement.ray_scoring import RaySyncVerifiers

    return RaySyncVerifiers


ROWS = [{"ground_truth": str(a + b)} for a in range(4) for b in range(4)]
ANSWERS = [f"\\boxed{{{a + b + (a * b) % 2}}}" for a in range(4) for b in range(4)]  # some right, some wrong


def test_actors_score_like_local_workers_in_processes_of_their_own(local_ray) -> None:
    math = {"math": (MathVerifier, MathVerifier.Config())}
    remote, local = scorer(math, actors=2), scorer(math)
    try:
        far = asyncio.run(remote.score(ROWS, ANSWERS))
        near = asyncio.run(local.score(ROWS, ANSWERS))
        assert [s.reward for s in far] == [s.reward for s in near]
        assert 0 < sum(s.reward for s in far) < len(ROWS)  # both right and wrong answers
        assert len(remote.worker_pids) == 2
        actors = {where["pid"] for where in remote._sync.actors}
        assert {psutil.Process(pid).ppid() for pid in remote.worker_pids} == actors  # one pool per actor
        (where,) = remote.placement()  # what pipeline.json lists
        assert where["verifiers"] == ["math"] and where["where"] == "ray actors"
        assert {a["pid"] for a in where["actors"]} == actors and where["resources"] == {"num_cpus": 1, "num_gpus": 0.0}
    finally:
        remote.close()
        local.close()


def test_an_overrunning_call_times_out_on_the_actor_which_goes_on(local_ray) -> None:
    remote = scorer({"hang": (faulty.Hang, NoConfig()), "pid": (faulty.Pid, NoConfig())}, actors=1, timeout_s=1.0)
    try:
        hung = asyncio.run(remote.score([{"verifier": "hang"}], ["x"]))
        assert hung[0].reward == 0.0 and hung[0].error is not None, hung[0]
        assert hung.stats.report()["verifier/hang/timeouts"] == 1.0
        after = asyncio.run(remote.score([{"verifier": "pid"}] * 3, ["a", "b", "c"]))
        assert [s.reward for s in after] == [1.0, 1.0, 1.0]
    finally:
        remote.close()


def test_a_dead_actor_fails_the_next_call_naming_it(local_ray) -> None:
    remote = scorer({"math": (MathVerifier, MathVerifier.Config())}, actors=1)
    try:
        remote.start()
        actor_pid = remote._sync.actors[0]["pid"]
        os.kill(actor_pid, signal.SIGKILL)
        with pytest.raises(RunError, match=rf"scoring actor 0 \(Ray actor \w+, pid {actor_pid} on \S+\) died while scoring"):
            asyncio.run(remote.score(ROWS[:2], ANSWERS[:2]))
    finally:
        remote.close()
