"""One variant of a sweep, run as a run is: opened (:func:`~grpo_run.core.loop.opening.open_run`),
built (:func:`~grpo_run.core.loop.run.start_run`, on its share of the sweep's base model and
engine), its loop driven (:meth:`~grpo_run.core.loop.wiring.LoopRig.looped`) beside the other
variants', then finished, summarized and closed -- the steps of
:func:`~grpo_run.core.loop.run.train`, taken one by one so that the sweep can interleave them.

Whatever stops one variant (a verifier it alone uses failing, a bad data file of its own) ends
that variant alone: :attr:`VariantRun.status` and :attr:`VariantRun.reason` say how.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grpo_run.core.config.schema import RunConfig
from grpo_run.core.errors import RunError, UserError
from grpo_run.core.loop.checkpoint import find_checkpoint
from grpo_run.core.loop.opening import OpenedRun, SharedOutput, open_run
from grpo_run.core.loop.run import start_run, stop_before_the_loop
from grpo_run.core.loop.signals import RunInterrupted, StopRequested
from grpo_run.core.loop.wiring import LoopRig
from grpo_run.core.plugins.host import PluginHost
from grpo_run.core.runlog import get_logger
from grpo_run.core.sweep.placement import VariantPlacement


class VariantRun:
    """A variant's run and where it stands. Its code runs in a context of its own
    (:attr:`context`), so that what it logs goes to its ``log.jsonl``."""

    def __init__(self, name: str, adapter: str, cfg: RunConfig, run_dir: Path, *, resume: bool, overwrite: bool) -> None:
        self.name, self.adapter, self.cfg, self.run_dir = name, adapter, cfg, run_dir
        self.resume_from = run_dir if resume else None
        self.overwrite = overwrite
        self.context = contextvars.copy_context()
        self.run: OpenedRun | None = None
        self.rig: LoopRig | None = None
        self.status = "pending"
        self.reason: str | None = None
        self.error: BaseException | None = None
        self.on_change: Callable[[VariantRun], None] = lambda variant: None
        """Told each time :attr:`status` changes (the sweep rewrites ``sweep.json``)."""

    # -- building ---------------------------------------------------------------------------

    def start(self, host: PluginHost, output: SharedOutput, placement: VariantPlacement) -> None:
        """Open and build the run (in its context). A failure fails this variant alone; a stop
        signal (:class:`StopRequested`) goes on up, the variant marked interrupted."""
        self.context.run(self._start, host, output, placement)

    def _start(self, host: PluginHost, output: SharedOutput, placement: VariantPlacement) -> None:
        try:
            self.run = open_run(self.cfg, host, self.run_dir, self.resume_from, self.overwrite, shared=output)
            with stop_before_the_loop(self.run):
                self.rig = start_run(self.run, host, self._report, placement=placement)
        except RunInterrupted as exc:
            self._end("interrupted", exc)
            raise StopRequested(exc.signal_name) from None
        except StopRequested as exc:
            self._end("interrupted", exc)
            raise
        except Exception as exc:
            self._end("failed", exc)
            return
        self._set("running")

    # -- running ----------------------------------------------------------------------------

    async def drive(self, leave: Callable[[str], None]) -> None:
        """The variant's loop to its end, then its final checkpoint and summary (``leave``: tells
        the shared engine it asks no more)."""
        assert self.rig is not None
        status, error = "failed", None
        try:
            state = await self.rig.looped()
            leave(self.adapter)
            self.rig.finish(state)  # after a stop signal: RunInterrupted
            status = "completed"
            self.rig.summarize(state)
        except RunInterrupted as exc:
            status, error = "interrupted", exc
            get_logger().info("run_interrupted", signal=exc.signal_name, step=exc.step,
                              checkpoint=str(exc.checkpoint) if exc.checkpoint else None)
        except Exception as exc:
            error = exc
            get_logger().error("run_failed", error=f"{type(exc).__name__}: {exc}", exc_info=True)
        finally:
            leave(self.adapter)
            self._end(status, error)

    def request_stop(self, signal_name: str) -> None:
        if self.rig is not None and self.status == "running":
            self.rig.loop.request_stop(signal_name)

    @property
    def step(self) -> int:
        """Learner steps completed (the loop's count, or the newest checkpoint's)."""
        if self.rig is not None:
            return self.rig.loop.state.version
        return int(self.run.start_step) if self.run is not None else 0

    @property
    def metrics(self) -> dict[str, float]:
        return dict(self.run.last.values) if self.run is not None else {}

    def checkpoint(self) -> Path | None:
        try:
            return find_checkpoint(self.run_dir)
        except UserError:
            return None

    # -- ending -----------------------------------------------------------------------------

    def close_unfinished(self, status: str, error: BaseException | None = None) -> None:
        """End a variant that was built but never driven (the sweep stopped first)."""
        if self.status in ("pending", "running"):
            self.context.run(self._end, status, error)

    def _end(self, status: str, error: BaseException | None) -> None:
        if self.status in ("completed", "failed", "interrupted"):
            return  # ended already
        self.error = error
        self.reason = _reason(status, error)
        run = self.run
        if run is not None:
            if status == "failed" and self.reason:
                run.progress.message(f"run stopped: {self.reason}")
            elif isinstance(error, RunInterrupted):
                saved = f"checkpoint {error.checkpoint}" if error.checkpoint is not None else "nothing to save"
                run.progress.message(f"interrupted by {error.signal_name} after step {error.step}: {saved}")
            run.close(status, error)
        self._set(status)

    def _set(self, status: str) -> None:
        self.status = status
        self.on_change(self)

    def _report(self, exc: RunInterrupted) -> list[str]:
        """Where this variant stands after a stop from outside its loop (held by blocking code)."""
        if exc.checkpoint is None:
            return [f"interrupted by {exc.signal_name} before its first step finished: nothing to save"]
        return [f"interrupted by {exc.signal_name} after step {exc.step}: checkpoint {exc.checkpoint}"]


def _reason(status: str, error: BaseException | None) -> str | None:
    """The one line ``sweep.json`` and the console give for a variant that did not complete."""
    if status == "completed" or error is None:
        return None
    if isinstance(error, RunInterrupted):
        return f"interrupted by {error.signal_name} after step {error.step}"
    if isinstance(error, StopRequested):
        return f"interrupted by {error.signal_name} before it started"
    if isinstance(error, (RunError, UserError)):
        return str(error).splitlines()[0] if str(error) else type(error).__name__
    return f"{type(error).__name__}: {error}".splitlines()[0]


def combined(variants: list[VariantRun], each: Callable[[VariantRun], list[str]]) -> list[str]:
    """The lines of every running variant's answer, each prefixed with its name; none (wait on)
    when any variant answered none."""
    lines: list[str] = []
    for variant in variants:
        if variant.rig is None or variant.status != "running":
            continue
        answer = variant.context.run(each, variant)
        if not answer:
            return []
        lines += [f"{variant.name}: {line}" for line in answer]
    return lines


def held_by_any(owns: list[Callable[[], Any]]) -> Callable[[], Any]:
    """What holds the shared event loop, as any variant's monitors see it."""
    def held_by() -> Any:
        for own in owns:
            found = own()
            if found is not None:
                return found
        return None
    return held_by
