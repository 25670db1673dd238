"""The learner as the loop and the checkpointer see it, whatever the strategy and placement.

:class:`LearnerGroup` is the facade: the loop's ``LearnerLike`` calls (``train_step``,
``skip_step``, ``weights_snapshot``) plus what checkpoints need (``state_dict``,
``load_state_dict``, ``save_pretrained``). :class:`InProcessLearner` is the single-process
learner of today; :class:`RankedLearnerGroup` drives ``num_learners`` ranks
(:class:`~grpo_run.core.placement.learner_rank.LearnerRank`) living in local processes or Ray
actors, through any worker handle that offers ``submit(method, *args) -> Future``.

A rank that dies or fails ends the step at once with a :class:`~grpo_run.core.errors.RunError`
naming the rank, its process and the step; the other ranks (possibly waiting for it in a
collective) are stopped, and no checkpoint is written after the failure.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, wait
from pathlib import Path
from typing import Any, Protocol

from grpo_run.core.errors import RunError, UserError
from grpo_run.core.learner.learner import Learner
from grpo_run.core.learner.lora import merged_model_writer
from grpo_run.core.placement.flat import encode_sequences
from grpo_run.core.placement.heartbeat import BEAT_S, HeartbeatMonitor
from grpo_run.core.placement.processes import WorkerDied
from grpo_run.core.plugins.adapters import LoraAdapter
from grpo_run.core.rollout.packing import SequenceToPack
from grpo_run.core.runlog import get_logger

_BLAME_WAIT_S = 3.0


class LearnerGroup(Protocol):
    """What the loop and the checkpointer ask of the learner."""

    steps: int
    """Learner steps completed."""
    num_parameters: int
    budget_line: str | None
    """How an automatic token budget was chosen (rank 0's), for the console; ``None``: none was."""

    def train_step(self, seqs: Sequence[SequenceToPack]) -> dict[str, float]: ...

    def skip_step(self) -> None: ...

    def weights_snapshot(self) -> Mapping[str, Any] | LoraAdapter:
        """The full policy weights (name -> CPU tensor), or with ``model.lora.sync = "adapter"`` the
        LoRA adapter; safe to keep while training goes on."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """The learner state a checkpoint's ``trainer_state.pt`` holds (optimizer, schedule, steps)."""
        ...

    def load_state_dict(self, state: Mapping[str, Any], checkpoint: Path) -> None:
        """Restore ``state`` (and the strategy's own files under ``checkpoint``)."""
        ...

    def save_pretrained(self, directory: str | Path, safe_serialization: bool = True) -> None:
        """Write the full policy in Hugging Face format (gathered from every shard) and the
        strategy's own state files into ``directory``."""
        ...

    def close(self) -> None: ...


class InProcessLearner:
    """``strategy = "single"`` with ``backend = "local"``: the learner lives in this process."""

    def __init__(self, learner: Learner) -> None:
        self.learner = learner
        self.num_parameters = sum(p.numel() for p in learner.policy.parameters())
        self.budget_line = learner.budget_line
        """How an automatic token budget was chosen (``None``: none was)."""

    @property
    def steps(self) -> int:
        return self.learner.steps

    def train_step(self, seqs: Sequence[SequenceToPack]) -> dict[str, float]:
        return self.learner.train_step(seqs)

    def skip_step(self) -> None:
        self.learner.skip_step()

    def weights_snapshot(self) -> Mapping[str, Any] | LoraAdapter:
        return self.learner.weights_snapshot()

    def state_dict(self) -> dict[str, Any]:
        return self.learner.state_dict()

    def load_state_dict(self, state: Mapping[str, Any], checkpoint: Path) -> None:
        self.learner.load_state_dict(state)

    def save_pretrained(self, directory: str | Path, safe_serialization: bool = True) -> None:
        self.learner.policy.save_pretrained(directory, safe_serialization=safe_serialization)

    def extra_writer(self) -> Callable[[Path], None] | None:
        """What a checkpoint writes besides the policy: a LoRA run's merged model, when asked for."""
        return merged_model_writer(self.learner)

    def close(self) -> None:
        pass


class RankWorker(Protocol):
    """A handle on one rank's process or actor."""

    def submit(self, method: str, *args: Any) -> Future:
        """Call ``method`` on the rank; a rank that dies fails the future with :class:`WorkerDied`."""
        ...

    def describe(self) -> str: ...

    def close(self, grace_s: float = 10.0) -> None: ...

    def kill(self) -> None: ...


class RankedLearnerGroup:
    """``num_learners`` ranks driven in lockstep: every call goes to every rank, rank 0 answers.

    ``share`` turns an argument every rank receives into what is sent (Ray: one ``ray.put`` for
    all ranks). Rank 0's weights come back as its rank ships them (Ray: a lazy handle on an object
    reference, :class:`~.ray_actors.RemoteWeights`), and go to the engines as they are.
    """

    def __init__(
        self,
        workers: Sequence[RankWorker],
        *,
        share: Callable[[Any], Any] = lambda value: value,
        hang_timeout_s: float | None = None,
    ) -> None:
        self.workers = list(workers)
        self.hang_timeout_s = hang_timeout_s
        """With it, :meth:`start` watches the ranks' heartbeats (:mod:`.heartbeat`) during every later call."""
        self._monitor: HeartbeatMonitor | None = None
        self._share = share
        self.steps = 0
        self.num_parameters = 0
        self.budget_line: str | None = None
        self.where: list[tuple[int, str]] = []
        """``(pid, host)`` of each rank, once started."""
        self._broken: str | None = None

    def start(self, init_method: str | None = None, *, timeout_s: float | None = None, hint: str = "") -> None:
        """Wait for every rank to join the process group (at ``init_method``, default each rank's
        setup) and build its learner; ranks not started within ``timeout_s`` fail the run (with
        ``hint`` saying why that may be). Given ``hang_timeout_s`` and ``init_method``, the ranks'
        heartbeats are watched from then on."""
        infos = self._call_all("start", init_method, step_label="start-up", timeout_s=timeout_s, hint=hint)
        if self.hang_timeout_s is not None and init_method:
            self._monitor = HeartbeatMonitor(init_method, len(self.workers), self.hang_timeout_s)
        self.num_parameters = int(infos[0]["parameters"])
        self.budget_line = infos[0].get("budget_line")
        self.where = [(i["pid"], i["host"]) for i in infos]
        # reference_bytes: what each rank holds of the reference policy's weights (sharded or whole).
        get_logger().info("learners_started", ranks=[{k: i[k] for k in ("rank", "pid", "host", "reference_bytes")}
                                                     for i in infos],
                          rendezvous=init_method)

    def train_step(self, seqs: Sequence[SequenceToPack]) -> dict[str, float]:
        metrics = self._call_all("train_step", self._share(encode_sequences(seqs)), step_label=f"step {self.steps + 1}")[0]
        self.steps += 1
        return metrics

    def skip_step(self) -> None:
        self._call_all("skip_step", step_label=f"step {self.steps + 1}")
        self.steps += 1

    def weights_snapshot(self) -> Mapping[str, Any] | LoraAdapter:
        return self._call_all("weights", step_label=f"step {self.steps}")[0]

    def state_dict(self) -> dict[str, Any]:
        return self._call_all("state_dict", step_label=f"step {self.steps}")[0]

    def load_state_dict(self, state: Mapping[str, Any], checkpoint: Path) -> None:
        self._call_all("load_state_dict", self._share(dict(state)), str(checkpoint), step_label="resume")
        self.steps = int(state["steps"])

    def save_pretrained(self, directory: str | Path, safe_serialization: bool = True) -> None:
        self._call_all("save", str(directory), step_label=f"checkpoint of step {self.steps}")

    def close(self) -> None:
        if self._broken is None:
            try:
                self._call_all("close", step_label="shutdown")
            except (RunError, UserError):
                pass
        for worker in self.workers:
            worker.close()

    # -- fan-out ---------------------------------------------------------------------------

    def _call_all(
        self, method: str, *args: Any, step_label: str, timeout_s: float | None = None, hint: str = ""
    ) -> list[Any]:
        if self._broken is not None:
            raise RunError(f"the learner group is unusable: {self._broken}")
        futures = [worker.submit(method, *args) for worker in self.workers]
        waiting = self._wait(futures, method, step_label, timeout_s)
        if waiting and not any(f.done() and f.exception() is not None for f in futures):
            for worker in self.workers:
                worker.kill()
            late = ", ".join(w.describe() for w, f in zip(self.workers, futures) if not f.done())
            self._broken = f"{late} did not finish {method} ({step_label}) within {timeout_s:g} s"
            raise RunError(f"{self._broken}{'; ' + hint if hint else ''}")
        failed = [(w, f.exception()) for w, f in zip(self.workers, futures) if f.done() and f.exception() is not None]
        if failed:
            # A rank that dies makes its peers' collectives fail too: give the news of the death
            # a moment to arrive, and blame the rank that died rather than a peer that lost it.
            wait(futures, timeout=_BLAME_WAIT_S)
            failed = [(w, f.exception()) for w, f in zip(self.workers, futures) if f.done() and f.exception() is not None]
            worker, error = next(((w, e) for w, e in failed if isinstance(e, WorkerDied)), failed[0])
            self._fail(worker, method, step_label, error)
        return [future.result() for future in futures]

    def _wait(self, futures: list[Future], method: str, step_label: str, timeout_s: float | None) -> set[Future]:
        """Wait until every rank answered, one failed, or ``timeout_s`` passed (the futures still
        waited for); a rank the heartbeats show hung ends the call at once."""
        if self._monitor is None:
            return wait(futures, timeout=timeout_s, return_when=FIRST_EXCEPTION).not_done
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        self._monitor.reset()
        while True:
            left = BEAT_S if deadline is None else min(BEAT_S, max(0.0, deadline - time.monotonic()))
            _, waiting = wait(futures, timeout=left, return_when=FIRST_EXCEPTION)
            if not waiting or any(f.done() and f.exception() is not None for f in futures):
                return waiting
            if deadline is not None and time.monotonic() >= deadline:
                return waiting
            verdict = self._monitor.check([i for i, f in enumerate(futures) if not f.done()])
            if verdict is not None:
                why, hung = verdict
                names = ", ".join(self.workers[i].describe() for i in hung)  # before the kill changes it
                for worker in self.workers:
                    worker.kill()
                self._broken = f"{names} {why} during {method} ({step_label})"
                get_logger().error("learner_rank_hung", ranks=hung, method=method, step=step_label, reason=why)
                raise RunError(f"{self._broken}; the run stops (checkpoints written before are intact)")

    def _fail(self, worker: RankWorker, method: str, step_label: str, error: BaseException) -> None:
        """Stop every rank (the others may wait for this one in a collective) and raise."""
        for other in self.workers:
            other.kill()
        where = ""
        if self.where:  # "pid N on host": say what the worker's own description lacks
            pid, host = self.where[self.workers.index(worker)]
            where = "" if f"pid {pid}" in worker.describe() else f" (pid {pid} on {host})"
        if isinstance(error, WorkerDied):
            self._broken = f"{worker.describe()}{where} died during {method} ({step_label})"
            raise RunError(f"{self._broken}; the run stops (checkpoints written before are intact)")
        self._broken = f"{worker.describe()}{where} failed during {method} ({step_label})"
        get_logger().error("learner_rank_failed", worker=worker.describe(), method=method, step=step_label,
                           error=f"{type(error).__name__}: {error}", notes=getattr(error, "__notes__", None))
        if isinstance(error, UserError):
            raise error
        raise RunError(f"{self._broken}: {type(error).__name__}: {error}") from error
