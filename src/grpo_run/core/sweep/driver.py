"""Running a sweep: its variants as runs side by side in one process, sharing one base model and
one engine, each driven by the training loop that drives one run.

The variants are built one after the other (the first loads the base model and starts the
engine), then their loops run concurrently on one event loop (:meth:`LoopRig.looped`), their
compute in the loop's worker thread as a run's does: generation batched across variants
(:mod:`.shared_engine`), learner steps in turn (:mod:`.shared_learner`). Each variant writes
its own run directory ``<sweep dir>/<variant>/``, exactly as a run does. ``sweep.json`` says
where each stands. A stop signal stops every variant, each saving its checkpoint as a run does;
resuming (:func:`plan_variants` with ``resume``) continues every variant that did not complete.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs
import structlog

from grpo_run.core.errors import UserError
from grpo_run.core.loop.checkpoint import find_checkpoint, load_trainer_state
from grpo_run.core.loop.opening import SharedOutput
from grpo_run.core.loop.progress import ProgressBoard
from grpo_run.core.loop.rundir import checkpoints_dir, existing_run
from grpo_run.core.loop.signals import StopRequested, StopSignals
from grpo_run.core.plugins.host import PluginHost
from grpo_run.core.runlog import LibraryOutput, get_logger, route_run_logs
from grpo_run.core.sweep.configs import VariantConfig, sweep_slots
from grpo_run.core.sweep.manifest import SweepManifest, is_sweep
from grpo_run.core.sweep.placement import VariantPlacement
from grpo_run.core.sweep.shared_engine import SharedEngine
from grpo_run.core.sweep.shared_learner import SharedBase
from grpo_run.core.sweep.variant_run import VariantRun, combined, held_by_any


@attrs.frozen
class VariantOutcome:
    name: str
    status: str
    reason: str | None
    run_dir: Path
    step: int
    metrics: dict[str, float]
    checkpoint: Path | None


@attrs.frozen
class SweepOutcome:
    directory: Path
    variants: list[VariantOutcome]
    interrupted: str | None = None
    """The stop signal that ended the sweep (``None``: it ran to its end)."""


def plan_variants(configs: Sequence[VariantConfig], directory: Path, manifest: SweepManifest, *,
                  resume: bool, overwrite: bool) -> list[VariantRun]:
    """The variants to run: all of a new sweep (a directory already holding a sweep, or a run
    where a variant's would go, is refused unless ``overwrite``); on ``resume``, every variant that
    did not complete, from its newest checkpoint (or from the start when it has none)."""
    if not resume and not overwrite:
        taken = [f"{directory}/sweep.json"] if is_sweep(directory) else []
        for vc in configs:
            run_dir = directory / vc.variant.name
            taken += [f"{run_dir}/{found}" for found in existing_run(run_dir, checkpoints_dir(vc.cfg, run_dir))]
        if taken:
            raise UserError(f"{directory} already holds a sweep ({', '.join(taken[:3])}): pass --resume {directory} "
                            f"to continue it, or --overwrite to start it again, or choose another --output-dir")
    out = []
    for vc in configs:
        name, adapter, cfg = vc.variant.name, vc.variant.adapter, vc.cfg
        run_dir = directory / name
        if not resume:
            out.append(VariantRun(name, adapter, cfg, run_dir, resume=False, overwrite=overwrite))
            continue
        if manifest.entry(name).status == "completed":
            continue
        step = _saved_step(run_dir)
        if step is not None and step >= cfg.train.total_steps:  # finished as a run of its own
            entry = manifest.entry(name)
            entry.status, entry.step, entry.reason = "completed", step, None
            continue
        out.append(VariantRun(name, adapter, cfg, run_dir, resume=step is not None, overwrite=step is None))
    return out


def _saved_step(run_dir: Path) -> int | None:
    try:
        return int(load_trainer_state(find_checkpoint(run_dir))["step"])
    except (UserError, KeyError, ValueError):
        return None


def run_sweep(configs: Sequence[VariantConfig], variants: Sequence[VariantRun], host: PluginHost, directory: Path,
              manifest: SweepManifest, report_interrupted: Callable[[str], list[str]] | None = None) -> SweepOutcome:
    """Run ``variants`` (of ``configs``, all the sweep's) in ``directory``; returns where each
    ended. ``report_interrupted(signal)``: the lines that end what a stop from outside the event
    loop prints (the command that resumes the sweep)."""
    first = configs[0].cfg
    directory.mkdir(parents=True, exist_ok=True)
    sweep_log = route_run_logs(directory, first.logging.level)
    library = LibraryOutput()
    library.start()
    board = ProgressBoard(enabled=first.logging.progress)
    base = SharedBase()
    engine = SharedEngine(sweep_slots([c.cfg for c in configs], host.registry), [v.adapter for v in variants])
    for variant in variants:
        variant.on_change = lambda v: _changed(v, manifest, directory, board)
    for entry in manifest.variants:
        if entry.status != "completed" and all(v.name != entry.name for v in variants):
            entry.status = "completed"
    manifest.write(directory)
    get_logger().info("sweep_start", directory=str(directory), variants=[v.name for v in variants])
    interrupted = None
    try:
        with StopSignals() as signals:
            try:
                for variant in variants:
                    variant.start(host, SharedOutput(board, library, variant.name),
                                  VariantPlacement(variant.adapter, base, engine))
                    if variant.status != "running":
                        engine.leave(variant.adapter)
                asyncio.run(_drive_all([v for v in variants if v.status == "running"], signals, engine,
                                       report_interrupted))
                interrupted = signals.received
            except StopRequested as exc:
                interrupted = exc.signal_name
            finally:
                signals.finishing()
                for variant in variants:
                    variant.close_unfinished("interrupted" if interrupted else "failed")
    finally:
        engine.close()
        base.close()
        board.close()
        get_logger().info("sweep_end", interrupted=interrupted,
                          statuses={e.name: e.status for e in manifest.variants})
        library.stop()
        structlog.reset_defaults()
        sweep_log.close()
    outcomes = [_outcome(v, directory) for v in variants]
    return SweepOutcome(directory, outcomes, interrupted)


async def _drive_all(running: list[VariantRun], signals: StopSignals, engine: SharedEngine,
                     report: Callable[[str], list[str]] | None) -> None:
    """Every variant's loop side by side; a stop signal reaches them all."""
    if not running:
        return
    loop = asyncio.get_running_loop()
    owns = [v.rig.held_by for v in running if v.rig is not None]
    held_by = held_by_any(owns)
    for variant in running:
        assert variant.rig is not None
        variant.rig.held_by = held_by  # the loop is the variants' one: what holds it holds them all
    limits = [v.cfg.train.max_loop_hold_s for v in running if v.cfg.train.max_loop_hold_s > 0]

    def stuck(signal_name: str, holder: str, held: bool) -> list[str]:
        lines = combined(running, lambda v: v.rig.stuck(signal_name, holder, held))
        return lines + (report(signal_name) if lines and report is not None else [])

    def held_too_long(holder: str, in_total: bool) -> list[str]:
        lines = combined(running, lambda v: v.rig.held_too_long(holder, in_total))
        return lines + (report("train.max_loop_hold_s") if lines and report is not None else [])

    def held_in_step(now: tuple[str, float] | None) -> tuple[str, float] | None:
        totals = [t for v in running if v.rig is not None and (t := v.rig.holds.total(now)) is not None]
        return max(totals, key=lambda t: t[1], default=None)

    def stop_all(signal_name: str) -> None:
        for variant in running:
            variant.request_stop(signal_name)

    signals.looping(loop, stop_all, held_by=held_by, on_stuck=stuck, hold_limit_s=min(limits, default=0.0),
                    on_held_too_long=held_too_long, held_in_step=held_in_step)
    tasks = [loop.create_task(v.drive(engine.leave), name=f"variant-{v.name}", context=v.context) for v in running]
    await asyncio.gather(*tasks)


def _changed(variant: VariantRun, manifest: SweepManifest, directory: Path, board: ProgressBoard) -> None:
    entry = manifest.entry(variant.name)
    entry.status, entry.reason, entry.step = variant.status, variant.reason, variant.step  # type: ignore[assignment]
    manifest.write(directory)
    if variant.status == "failed" and variant.run is None:  # failed before its run could speak
        board.message(f"{variant.name}: run stopped: {variant.reason}")


def _outcome(variant: VariantRun, directory: Path) -> VariantOutcome:
    return VariantOutcome(variant.name, variant.status, variant.reason, variant.run_dir, variant.step,
                          variant.metrics, variant.checkpoint())
