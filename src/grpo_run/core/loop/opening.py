"""A run's surroundings, from before its parts are built until after they are closed: the run
directory and its ``config.toml``, the log, the console, lifecycle hooks, the Hub pusher, the
checkpoint it resumes from (:func:`open_run`, :meth:`OpenedRun.close`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import attrs
import structlog

from grpo_run.core.config import dump_config_toml
from grpo_run.core.config.advice import config_warnings
from grpo_run.core.config.schema import RunConfig
from grpo_run.core.errors import UserError
from grpo_run.core.learner.cpu_bf16 import cpu_flags, slow_bf16_warning
from grpo_run.core.learner.spec import resolve_device
from grpo_run.core.loop.build import RunParts
from grpo_run.core.loop.fserrors import write_text_atomically, writing
from grpo_run.core.loop.hub import HubPusher
from grpo_run.core.loop.observers import LifecycleHooks, Observer, StepEvent, close_all
from grpo_run.core.loop.progress import ProgressBoard, RunProgress
from grpo_run.core.loop.resuming import resume_point
from grpo_run.core.loop.rundir import checkpoints_dir, forget_unstarted_run, prepare_run_dir
from grpo_run.core.plugins.host import PluginHost
from grpo_run.core.runlog import LibraryOutput, configure_run_logging, get_logger, log_here, open_run_log
from grpo_run.core.secrets import mask_secrets


class LastMetrics:
    """Keeps every metric seen (the newest value of each): what ``train`` returns."""

    def __init__(self) -> None:
        self.values: dict[str, float] = {}
        self.trained = False
        """Whether a learner step finished (step 0 is the evaluation before training)."""

    def on_step(self, event: StepEvent) -> None:
        self.values.update(event.metrics)
        self.trained = self.trained or event.step > 0

    def on_run_end(self, status: str, error: BaseException | None) -> None:
        pass


@attrs.frozen
class SharedOutput:
    """Where a run that shares its process with other runs (a sweep's variant) speaks: its line
    ``label`` on ``board``, its ``log.jsonl`` through the process's routed log (set up by the owner:
    :func:`~grpo_run.core.runlog.route_run_logs`), the libraries' output taken over by the owner."""

    board: ProgressBoard
    library_output: LibraryOutput
    label: str


@attrs.define(eq=False)
class OpenedRun:
    """An opened run: where it writes, what it resumes from, how it speaks; the parts and
    observers, once there, for :meth:`close` to close."""

    cfg: RunConfig
    run_dir: Path
    checkpoint: Path | None
    """The checkpoint the run resumes from (None: a new run)."""
    trainer_state: dict[str, Any] | None
    start_step: int
    progress: RunProgress
    log_file: Any
    library_output: LibraryOutput
    hooks: LifecycleHooks
    pusher: HubPusher | None
    last: LastMetrics = attrs.Factory(LastMetrics)
    parts: RunParts | None = None
    observers: list[Observer] = attrs.Factory(list)
    owns_output: bool = True
    """The run set up the process's logging and library output (and puts them back at the end);
    not a sweep's variant, whose sweep does."""

    def close(self, status: str, error: BaseException | None) -> None:
        """End the run: observers, hooks, parts, the log; a new run that learnt nothing leaves
        nothing a retry would have to ``--overwrite``."""
        if self.pusher is not None:
            self.pusher.finish(completed=status == "completed")
        close_all(self.observers, status, error)
        if not self.observers:
            self.progress.close()
        self.hooks.notify("grpo_run_run_end", run_dir=str(self.run_dir), status=status, error=error)
        if self.parts is not None:
            self.parts.close()
        get_logger().info("run_end", status=status)
        if self.owns_output:
            # Stop writing to the closed file: code that logs after the run (a second run in the
            # same process, tests) gets structlog's defaults back instead of an I/O error.
            self.library_output.stop()
            structlog.reset_defaults()
        self.log_file.close()
        if status == "failed" and self.checkpoint is None and not self.last.trained:
            forget_unstarted_run(self.run_dir)  # nothing learnt: a retry must not need --overwrite


def open_run(cfg: RunConfig, host: PluginHost, run_dir: Path, resume_from: str | Path | None,
             overwrite: bool, shared: SharedOutput | None = None) -> OpenedRun:
    """Find the checkpoint to resume from, prepare ``run_dir`` (see :mod:`.rundir`), write the
    config, start the log and the console, and say what the config and the directory call for.
    ``shared``: the run shares the process with others (a sweep's variant), and its output."""
    name_deepspeeds_accelerator()
    damaged: list[str] = []
    checkpoint, trainer_state, start_step = resume_point(cfg, resume_from, damaged.append)
    notes = prepare_run_dir(run_dir, checkpoints_dir(cfg, run_dir),
                            resume_step=start_step if checkpoint is not None else None, overwrite=overwrite)
    write_text_atomically(run_dir / "config.toml", mask_secrets(dump_config_toml(cfg)), "the run's config")
    with writing(run_dir / "log.jsonl", "the run log"):
        if shared is None:
            log_file = configure_run_logging(run_dir, cfg.logging.level)
        else:
            log_file = open_run_log(run_dir)
            log_here(log_file)
    if shared is None:
        library_output = LibraryOutput()  # libraries' warnings and log records: log.jsonl, not the console
        library_output.start()
    else:
        library_output = shared.library_output
    log = get_logger()
    progress = RunProgress(cfg.train.total_steps, enabled=cfg.logging.progress, temperature=cfg.rollout.temperature,
                           group_size=cfg.rollout.num_samples_per_prompt_rollout,
                           max_runtime_s=cfg.train.max_runtime_s,
                           board=shared.board if shared is not None else None,
                           label=shared.label if shared is not None else "")
    progress.message(f"grpo-run: run directory {run_dir}")
    for text in start_warnings(cfg):
        progress.warning(text)
        log.warning("config_advice", message=text)
    for text in damaged:
        progress.warning(text)
        log.warning("damaged_checkpoint_skipped", detail=text)
    for text in notes:
        progress.message(text)
        log.info("run_dir_prepared", detail=text)
    push = cfg.checkpoint.push_to_hub
    return OpenedRun(cfg, run_dir, checkpoint, trainer_state, start_step, progress, log_file, library_output,
                     LifecycleHooks(host, progress), HubPusher(push, progress.warning) if push is not None else None,
                     owns_output=shared is None)


def start_warnings(cfg: RunConfig) -> list[str]:
    """The config's warnings (:func:`config_warnings`) and a slow-bf16 CPU's."""
    out = config_warnings(cfg)
    if cfg.model.autocast != "none":
        try:
            device = resolve_device(cfg.model.device)
        except UserError:  # reported where the model is built
            device = cfg.model.device
        bf16 = slow_bf16_warning(cfg.model.autocast, device, cpu_flags())
        if bf16 is not None:
            out.append(bf16)
    return out


def name_deepspeeds_accelerator() -> None:
    """Where DeepSpeed is installed, transformers' ``save_pretrained`` imports it (through
    accelerate) even in a run that does not use it, and on a machine without CUDA its accelerator
    auto-detection prints a warning line into the run's output. Naming the CPU accelerator (what it
    would detect) keeps it quiet; a ``DS_ACCELERATOR`` set by the user wins."""
    import torch

    if "DS_ACCELERATOR" not in os.environ and not torch.cuda.is_available():
        os.environ["DS_ACCELERATOR"] = "cpu"
