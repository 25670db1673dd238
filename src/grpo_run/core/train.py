"""Runs one training job end to end: run directory, logging, the loop, saving, lifecycle hooks."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path

from grpo_run.core.checkpoint import rng_state, save_checkpoint
from grpo_run.core.config import dump_config_toml
from grpo_run.core.config.schema import RunConfig
from grpo_run.core.loop import TrainingLoop
from grpo_run.core.plugins import PluginHost
from grpo_run.core.progress import RunProgress
from grpo_run.core.runlog import configure_run_logging, get_logger
from grpo_run.core.setup import RunParts, build_run


def default_run_dir(cfg: RunConfig) -> Path:
    return Path(cfg.run.output_dir) / cfg.run.name


def train(cfg: RunConfig, host: PluginHost, run_dir: Path) -> dict[str, float]:
    """Train with ``cfg``; writes everything under ``run_dir``; returns the last metrics seen."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.toml").write_text(dump_config_toml(cfg), encoding="utf-8")
    log_file = configure_run_logging(run_dir, cfg.logging.level)
    log = get_logger()
    progress = RunProgress(cfg.train.total_steps, enabled=cfg.logging.progress)
    progress.message(f"grpo-run: run directory {run_dir}")
    parts: RunParts | None = None
    status, error = "failed", None
    last: dict[str, float] = {}
    try:
        parts = build_run(cfg, host, run_dir)
        _notify(host, progress, "grpo_run_run_start", config=cfg, run_dir=str(run_dir))

        def on_step(step: int, metrics: Mapping[str, float]) -> None:
            last.update(metrics)
            for tracker in parts.trackers:
                tracker.log(step, metrics)
            _notify(host, progress, "grpo_run_step_end", step=step, metrics=metrics)
            progress.update(step, metrics)
            if step == 0 and "eval/accuracy" in metrics:
                progress.message(f"starting eval/accuracy {metrics['eval/accuracy']:.3f}")
            log.info("step", step=step, **{k: float(v) for k, v in metrics.items()})

        loop = TrainingLoop(parts, on_step, lambda step: _save(parts, step))
        state = asyncio.run(loop.run())
        if cfg.checkpoint.save_final and state.last_saved_step != state.version:
            _save(parts, state.version)
        status = "completed"
        progress.message(
            f"done after {state.version} steps ({state.stop_reason}); "
            f"eval/accuracy {last.get('eval/accuracy', float('nan')):.3f}"
        )
        return last
    except KeyboardInterrupt as exc:
        status, error = "interrupted", exc
        if parts is not None:  # keep what was learnt
            _save(parts, parts.learner.steps)
        raise
    except BaseException as exc:
        error = exc
        log.error("run_failed", error=f"{type(exc).__name__}: {exc}", exc_info=True)
        raise
    finally:
        progress.close()
        _notify(host, progress, "grpo_run_run_end", run_dir=str(run_dir), status=status, error=error)
        if parts is not None:
            parts.close()
        log.info("run_end", status=status)
        log_file.close()


def _save(parts: RunParts, step: int) -> None:
    dest = parts.run_dir / "checkpoints" / f"step_{step}"
    save_checkpoint(
        dest,
        parts.learner.policy,
        parts.tokenizer,
        trainer_state={
            "learner": parts.learner.state_dict(),
            "sampler": parts.sampler.state_dict(),
            "rng": rng_state(),
            "step": step,
        },
        info={"step": step, "model": parts.cfg.model.name_or_path},
    )
    get_logger().info("checkpoint_saved", step=step, path=str(dest))


def _notify(host: PluginHost, progress: RunProgress, hook: str, **kwargs: object) -> None:
    for failure in host.notify(hook, **kwargs):
        get_logger().warning("plugin_hook_failed", detail=failure)
        progress.message(f"[yellow]warning:[/] {failure}")
